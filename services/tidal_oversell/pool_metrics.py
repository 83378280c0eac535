"""Oversell's metrics: the allocatable it grants summed per node pool next to
the nodes' own (the oversold share is the difference), and its node actions
by reason category. The sums are pure functions; `OversellMetrics` is the
Prometheus wiring, read at scrape time.

Units follow kube-state-metrics' `kube_node_status_allocatable`: a
`resource` label (cpu, memory) and a `unit` label (core, byte)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from tidal_schemas import Resources

from tidal_runtime.metrics import node_actions_counter

MIB = 1 << 20
# Every action oversell takes follows the node's memory utilisation (thresholds.py).
ACTION_REASONS = {"taint": "memory-pressure", "evict": "memory-pressure", "untaint": "memory-relieved"}


def in_units(r: Resources) -> dict[tuple[str, str], float]:
    """Resources as (resource, unit) -> value in base units."""
    return {("cpu", "core"): r.cpu_milli / 1000, ("memory", "byte"): float(r.memory_mib * MIB)}


def pool_totals(nodes: Iterable[tuple[str, str, Resources, Resources]]
                ) -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """(cluster, pool, resource, unit) -> (Σ granted, Σ own) over nodes given
    as (cluster, pool, allocatable granted last, the node's own allocatable)."""
    totals: dict[tuple[str, str, str, str], tuple[float, float]] = {}
    for cluster, pool, granted, own in nodes:
        own_units = in_units(own)
        for (resource, unit), value in in_units(granted).items():
            key = (cluster, pool, resource, unit)
            g, o = totals.get(key, (0.0, 0.0))
            totals[key] = (g + value, o + own_units[(resource, unit)])
    return totals


class OversellMetrics:
    def __init__(self, registry: CollectorRegistry,
                 nodes: Callable[[], Iterable[tuple[str, str, Resources, Resources]]]) -> None:
        self._nodes = nodes
        self.actions = node_actions_counter(registry)
        registry.register(self)

    def action(self, cluster: str, kind: str, dry_run: bool) -> None:
        self.actions.labels(cluster, kind, ACTION_REASONS.get(kind, "other"), str(dry_run).lower()).inc()

    def collect(self):
        labels = ["cluster", "pool", "resource", "unit"]
        allocatable = GaugeMetricFamily("tidal_oversell_allocatable", "Allocatable granted (possibly oversold), "
                                        "summed per node pool", labels=labels)
        own = GaugeMetricFamily("tidal_oversell_node_allocatable", "The nodes' own allocatable (before "
                                "oversell), summed per node pool", labels=labels)
        for key, (g, o) in sorted(pool_totals(self._nodes()).items()):
            allocatable.add_metric(list(key), g)
            own.add_metric(list(key), o)
        return [allocatable, own]
