"""What a simulation run saw, kept for the report: the arrival log (GPU
figures after every arrival), decision latencies, the timeline of
happenings, per-tick NUMA loads and tenant usage, and the actions and their
results. A plain container; `report.py` turns it into figures."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .expectations import Happening


@dataclass
class ArrivalLine:
    """After one arrival: cumulative arrived GPU request, allocated, idle and
    fragmented milli-GPU, and whether this pod was running when it settled."""

    pod: str
    arrived: int
    allocated: int
    idle: int
    frag: float
    placed: bool


@dataclass
class TickSample:
    """One tick: scenario time, NUMA loads per node, CPU used and requested
    (milli), and per tenant what its running pods request, by resource type."""

    t_s: float
    numa_load: dict[str, dict[int, float]]
    cpu_used: int
    cpu_requested: int
    tenant_usage: dict[str, dict[str, float]]


@dataclass
class Recorder:
    arrivals: list[ArrivalLine] = field(default_factory=list)
    released_at: dict[str, float] = field(default_factory=dict)  # pod -> wall time released
    latencies_s: dict[str, float] = field(default_factory=dict)  # pod -> first decision latency
    decisions: int = 0
    last_decision: dict[str, tuple[str, str, dict[str, int]]] = field(default_factory=dict)  # outcome, reason, filtered
    bind_results: Counter = field(default_factory=Counter)
    timeline: list[Happening] = field(default_factory=list)
    ticks: list[TickSample] = field(default_factory=list)
    actions: Counter = field(default_factory=Counter)  # (requested_by, kind) -> count
    results: Counter = field(default_factory=Counter)  # (kind, status) -> count
    allocatable: dict[str, dict[str, float]] = field(default_factory=dict)  # node -> last figures
    allocatable_events: int = 0

    def happen(self, t_s: float, kind: str, node: str | None = None, pod: str | None = None, detail: str = "",
               source: str = "") -> None:
        self.timeline.append(Happening(t_s, kind, node, pod, detail, source))
