"""Small builders for events in tests."""

from __future__ import annotations

from datetime import datetime, timezone

from tidal_schemas import NodeMetrics, PodLifecycle, Resources

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def figures_in(events) -> list:
    """The nodes' figures `score.node` / `node.allocatable` events hold, in
    order (each event a batch)."""
    return [score for event in events for score in event.payload.items]


def metrics(node: str, load: float = 0.5, **fields) -> NodeMetrics:
    return NodeMetrics(node=node, sampled_at=fields.pop("sampled_at", T0), interval_s=10.0,
                       node_cpu_util=load, numa_load={0: load}, **fields)


def pod(name: str, namespace: str = "default", phase: str = "pending", cpu_milli: int = 1000, **fields) -> PodLifecycle:
    return PodLifecycle(namespace=namespace, name=name, phase=phase, created_at=fields.pop("created_at", T0),
                        requests=Resources(cpu_milli=cpu_milli, memory_mib=fields.pop("memory_mib", 512)), **fields)


def numa_rows(*nodes, width: int = 4):
    """(free, load, valid) arrays of nodes × NUMA columns; each node a list
    of (free CPUs, load) per NUMA node, padded to `width` columns."""
    import numpy as np

    free = np.zeros((len(nodes), width), dtype=np.int64)
    load = np.zeros((len(nodes), width))
    valid = np.zeros((len(nodes), width), dtype=bool)
    for i, numas in enumerate(nodes):
        for j, (f, l) in enumerate(numas):
            free[i, j], load[i, j], valid[i, j] = f, l, True
    return free, load, valid
