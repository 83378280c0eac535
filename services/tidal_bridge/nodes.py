"""Node objects of the Kubernetes API → node facts and taint lists (pure).

Node facts are node-level only: capacity and allocatable of CPU, memory and
GPUs (the extended resource, 1000 milli-GPU per device) plus the node's
labels. The NUMA, CPU and GPU inventory comes from the node agent, which
publishes the full `NodeTopology` of the same node; see `service.py` for why
the bridge publishes these only when asked to. Node status (`NodeStatus`)
is the CPU and memory the kubelet admits against, always published.

A taint is identified by (key, effect), as in Kubernetes: adding one that is
present, or removing one that is absent, changes nothing (idempotent), and
every other taint is kept as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from tidal_schemas import NodeStatus, NodeTopology, Resources
from tidal_schemas.envelope import describe_validation_error

from .pods import GPU_RESOURCE
from .quantity import QuantityError, count, cpu_milli, memory_mib


def node_resources(figures: Mapping[str, Any] | None, gpu_resource: str = GPU_RESOURCE) -> Resources:
    """status.capacity / status.allocatable → Resources (milli-CPU, MiB,
    milli-GPU = devices × 1000); QuantityError when a figure is malformed."""
    figures = figures or {}
    return Resources(
        cpu_milli=cpu_milli(figures.get("cpu", 0)),
        memory_mib=memory_mib(figures.get("memory", 0)),
        gpu_milli=count(figures.get(gpu_resource, 0)) * 1000,
    )


def node_topology(node: Mapping[str, Any], gpu_resource: str = GPU_RESOURCE) -> tuple[NodeTopology | None, str]:
    """(the node-level `NodeTopology`, "") or (None, why it cannot be built).
    Allocatable is clamped to capacity (the schema requires it; the kubelet
    never reports more)."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    name = meta.get("name") or ""
    try:
        capacity = node_resources(status.get("capacity"), gpu_resource)
        allocatable = node_resources(status.get("allocatable") or status.get("capacity"), gpu_resource)
    except QuantityError as exc:
        return None, f"node {name}: {exc}"
    allocatable = Resources(**{f: min(getattr(allocatable, f), getattr(capacity, f))
                               for f in ("cpu_milli", "memory_mib", "gpu_milli")})
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    try:
        return NodeTopology(node=name, capacity=capacity, allocatable=allocatable, labels=labels), ""
    except ValidationError as exc:
        return None, f"node {name!r}: {describe_validation_error(exc)}"


def node_status(node: Mapping[str, Any]) -> tuple[NodeStatus | None, str]:
    """(the `NodeStatus` of a Node object: its status.allocatable CPU and
    memory, as the kubelet admits against them, or capacity when it has no
    allocatable, as the API server defaults it, "") or (None, why not: a
    figure malformed; "" for a node that reported neither yet). Not clamped
    to capacity: the oversold figure the webhook writes may be above it."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    name = meta.get("name") or ""
    figures = status.get("allocatable") or status.get("capacity")
    if not figures:
        return None, ""
    try:
        allocatable = Resources(cpu_milli=cpu_milli(figures.get("cpu", 0)), memory_mib=memory_mib(figures.get("memory", 0)))
        return NodeStatus(node=name, allocatable=allocatable), ""
    except QuantityError as exc:
        return None, f"node {name}: status.allocatable: {exc}"
    except ValidationError as exc:
        return None, f"node {name!r}: {describe_validation_error(exc)}"


def _is(taint: Mapping[str, Any], key: str, effect: str) -> bool:
    return taint.get("key") == key and taint.get("effect") == effect


def with_taint(taints: Sequence[Mapping[str, Any]] | None, key: str, effect: str,
               value: str | None = None) -> list[dict[str, Any]] | None:
    """The taint list with (key, effect) added, or None when it is already there."""
    current = [dict(t) for t in taints or []]
    if any(_is(t, key, effect) for t in current):
        return None
    taint: dict[str, Any] = {"key": key, "effect": effect}
    if value:
        taint["value"] = value
    return current + [taint]


def without_taint(taints: Sequence[Mapping[str, Any]] | None, key: str,
                  effect: str) -> list[dict[str, Any]] | None:
    """The taint list with (key, effect) removed, or None when it is absent."""
    current = [dict(t) for t in taints or []]
    kept = [t for t in current if not _is(t, key, effect)]
    return None if len(kept) == len(current) else kept
