"""The oversell policies by name (seed 003 `factor`, seed 004 `bounded`,
`none`): each turns a node's view, its pods and its latest sample into the
allocatable it is advertised with. Settings and the `node.allocatable`
schema name exactly these (tidal_schemas.node.OversellPolicy)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tidal_schemas import NodeAllocatable, NodeMetrics

from .allocatable import bounded_allocatable_event, factor_allocatable, unchanged_allocatable
from .pods_by_node import HeldPod

# name -> (view, pods, metrics, settings) -> NodeAllocatable
OVERSELL_POLICIES: dict[str, Callable[[Any, Sequence[HeldPod], NodeMetrics, Any], NodeAllocatable]] = {
    "factor": lambda view, pods, metrics, s: factor_allocatable(view.topology, pods, view.peak, view.factors,
                                                                metrics.sampled_at, s.factor()),
    "bounded": lambda view, pods, metrics, s: bounded_allocatable_event(view.topology, pods, metrics, view.peak,
                                                                        s.bounded(), s.warmup_s),
    "none": lambda view, pods, metrics, s: unchanged_allocatable(view.topology),
}
