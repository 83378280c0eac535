"""The node filters a placement decision counts nodes out by — the
`filtered` keys of a `pending` decision — with what each means to the
readers of that decision: the metric category a pending pod is counted
under (`tidal_scheduler_pending_pods{reason}`) and kube-scheduler's words
on the pod (`PodScheduled=False`). One table, so that placement's filters,
its metrics and the bridge's messages name the same things
(`tests/test_registry.py`)."""

from __future__ import annotations

from typing import NamedTuple

from .actions import STOP_SCHEDULING_TAINT


class NodeFilter(NamedTuple):
    category: str  # of the pending-pods metric
    phrase: str  # kube-scheduler's words for nodes filtered out ({gpu_resource}: the cluster's GPU resource)


NOT_PERMITTED, CPU, MEMORY, NO_EXCLUSIVE_CPUS = "not-permitted", "cpu", "memory", "no-exclusive-cpus"
GPU, GPU_MODEL, NUMA = "gpu", "gpu-model", "numa"
STOP_SCHEDULING = "stop-scheduling taint"  # a node's block reason, counted like a filter

NODE_FILTERS: dict[str, NodeFilter] = {
    NOT_PERMITTED: NodeFilter("permission", "node(s) are not permitted to the pod's tenant"),
    CPU: NodeFilter("cpu", "Insufficient cpu"),
    MEMORY: NodeFilter("memory", "Insufficient memory"),
    NO_EXCLUSIVE_CPUS: NodeFilter("numa", "node(s) offer no exclusive CPUs"),
    GPU_MODEL: NodeFilter("gpu-model", "node(s) had no GPU of the requested model"),
    GPU: NodeFilter("gpu", "Insufficient {gpu_resource}"),
    NUMA: NodeFilter("numa", "node(s) could not satisfy the pod's NUMA policy"),
    STOP_SCHEDULING: NodeFilter("taint", "node(s) had untolerated taint {{" + STOP_SCHEDULING_TAINT + ": }}"),
}
