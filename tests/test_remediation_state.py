"""Remediation snapshot: usage attribution, exclusive CPUs, hotspots (SPEC §E).

The builders at the top are shared by the other `test_remediation_*` files.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tidal_remediation import measured as m
from tidal_remediation.events import actions_to_events
from tidal_remediation.hotspot import find_cold, find_hotspots, unsampled
from tidal_remediation.memory import RemediationMemory
from tidal_remediation.plan import plan_round
from tidal_remediation.policy_settings import PolicySettings
from tidal_remediation.state import NodeState, layout_of, node_state_from, numa_shares
from tidal_schemas import ActionResult, Cpu, NodeAction, NodeMetrics, NodeTopology, NumaNode, PodUsage, Resources

T0 = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
NODE = "n1"
CPUS = 4            # CPUs per NUMA node: NUMA k holds CPUs 4k..4k+3, capacity 4000 milli-CPU
SETTINGS = PolicySettings()   # high 0.80, low 0.60, cool-down 30 s, 3 actions per round


# --- builders

def topology(numas: int = 2, reserved: tuple[int, ...] = ()) -> NodeTopology:
    """`numas` NUMA nodes of CPUS CPUs; two hyper-threads per core (core = cpu // 2)."""
    cpus = [Cpu(cpu=c, core=c // 2, socket=0, numa=c // CPUS) for c in range(numas * CPUS)]
    total = Resources(cpu_milli=numas * CPUS * 1000, memory_mib=1024)
    return NodeTopology(node=NODE, cpus=cpus, reserved_cpus=list(reserved), exclusive_cpus=True,
                        numa_nodes=[NumaNode(id=n, cpus=list(range(n * CPUS, (n + 1) * CPUS))) for n in range(numas)],
                        capacity=total, allocatable=total)


def be(name: str, milli: int, numa: tuple[int, ...] = (0,), frozen: bool = False,
       cpuset: tuple[int, ...] = ()) -> PodUsage:
    return PodUsage(pod=name, cpu_milli=milli, qos="BE", numa_nodes=list(numa), frozen=frozen, cpuset=list(cpuset))


def ls(name: str, milli: int, cpuset: tuple[int, ...]) -> PodUsage:
    return PodUsage(pod=name, cpu_milli=milli, qos="LS", cpuset=list(cpuset),
                    numa_nodes=sorted({c // CPUS for c in cpuset}))


def metrics(loads: list[float], pods=()) -> NodeMetrics:
    return NodeMetrics(node=NODE, sampled_at=T0, interval_s=10.0, numa_load=dict(enumerate(loads)), pods=list(pods))


def make_state(loads: list[float], pods=(), reserved: tuple[int, ...] = (), exclusive=None) -> NodeState:
    return node_state_from(metrics(loads, pods), layout_of(topology(len(loads), reserved)), exclusive)


def plan(loads, pods=(), memory=None, settings=SETTINGS, now=T0, **state_kw):
    return plan_round(make_state(loads, pods, **state_kw), memory or RemediationMemory(), settings, now)


def kinds(result) -> list[tuple[str, str]]:
    return [(a.kind, a.pod) for a in result.actions]


def action(kind: str, pod: str, numa: int = 0, at: datetime = T0, cpu: float | None = 400.0, load: float = 0.9,
           shares: dict[int, float] | None = None, action_id: str | None = None, **fields) -> NodeAction:
    """A remediation NodeAction as `actions_to_events` writes it."""
    figures = {m.AT: m.to_epoch(at), m.NUMA: float(numa), m.LOAD: load, m.PROJECTED: load, m.THRESHOLD: 0.8,
               **m.encode_shares(shares if shares is not None else {numa: cpu or 0.0}), **fields.pop("measured", {})}
    if cpu is not None:
        figures[m.POD_CPU] = cpu
    return NodeAction(action_id=action_id or f"{kind}-{pod}-{at.timestamp():.0f}", node=NODE, kind=kind, pod=pod,
                      reason="test", measured=figures, requested_by="remediation", **fields)


def result(act: NodeAction, status: str = "done") -> ActionResult:
    return ActionResult(action_id=act.action_id, node=act.node, kind=act.kind, pod=act.pod, status=status)


def remember(*actions: NodeAction, confirm: bool = True) -> RemediationMemory:
    """A memory that sent `actions` and, with `confirm`, heard each was done."""
    memory = RemediationMemory()
    for act in actions:
        memory.record_action(act)
        if confirm:
            memory.record_result(result(act))
    return memory


def run(state_loads, pods, memory, now, settings=SETTINGS):
    """Plan a round, publish it, record it: what a live service does."""
    events = actions_to_events(plan(state_loads, pods, memory, settings, now), NODE)
    for event in events:
        memory.record_action(event)
    return events


def ago(seconds: float) -> datetime:
    return T0 - timedelta(seconds=seconds)


# --- usage attribution

# NUMA 0 = CPUs 0-3, NUMA 1 = CPUs 4-7
SHARE_CASES = [
    ("one NUMA node: all of it", be("p", 800, numa=(0,)), {0: 800}),
    # 3 of its 4 CPUs on NUMA 0: 800·3/4 = 600, 800·1/4 = 200
    ("spanning, by cpuset CPUs", be("p", 800, numa=(0, 1), cpuset=(0, 1, 2, 4)), {0: 600, 1: 200}),
    ("spanning, shared pool (no cpuset): even split", be("p", 800, numa=(0, 1)), {0: 400, 1: 400}),
    # cpuset only on NUMA 0 although the pod is said to be on 0 and 1: NUMA 1 gets nothing
    ("cpuset inside one of its NUMA nodes", be("p", 900, numa=(0, 1), cpuset=(1, 2, 3)), {0: 900}),
    ("no NUMA nodes listed: read off the cpuset", PodUsage(pod="p", cpu_milli=500, cpuset=[5, 6]), {1: 500}),
    ("NUMA node the topology lacks: left out", be("p", 600, numa=(0, 7)), {0: 300}),
    ("nowhere", PodUsage(pod="p", cpu_milli=500), {}),
]


@pytest.mark.parametrize("pod, expected", [c[1:] for c in SHARE_CASES], ids=[c[0] for c in SHARE_CASES])
def test_numa_shares(pod, expected):
    state = make_state([0.5, 0.5], [pod])
    assert numa_shares(state.pods[0], state) == pytest.approx(expected)


# --- the snapshot

def test_snapshot_from_metrics_and_topology():
    state = make_state([0.9, 0.3], [ls("web", 500, (2, 3)), be("batch", 700, frozen=True)], reserved=(0,))
    assert state.numa[0].cpus == (0, 1, 2, 3) and state.numa[1].capacity_milli == 4000
    assert (state.numa[0].load, state.numa[1].load) == (0.9, 0.3)
    assert state.reserved_cpus == {0}
    assert state.cpu_core[5] == 2
    web, batch = state.pod("web"), state.pod("batch")
    assert (web.qos, web.numa_nodes, web.cpuset, web.exclusive) == ("LS", (0,), (2, 3), True)
    assert (batch.frozen, batch.cpu_milli) == (True, 700.0)


def test_unsampled_numa_node_has_no_load():
    state = node_state_from(NodeMetrics(node=NODE, sampled_at=T0, interval_s=10, numa_load={0: 0.95}),
                            layout_of(topology(2)))
    assert state.numa[1].load is None
    assert unsampled(state) == [1]
    assert [h.numa for h in find_hotspots(state, 0.8)] == [0] and find_cold(state, 0.6) == []


def test_nodes_of_the_same_hardware_share_one_layout():
    a, b = topology(2), topology(2).model_copy(update={"node": "other"})
    assert layout_of(a) is layout_of(b)
    assert layout_of(topology(2, (0,))) is not layout_of(a)  # reserved CPUs are part of the layout
    assert dict(layout_of(a).numa_cpus) == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}
    assert dict(layout_of(a).cores)[5] == 2


# the shared pool is every CPU (0-7, the node agent's), every non-reserved CPU (1-7) or a cpuset two pods hold
EXCLUSIVE_CASES = [
    ("own cpuset", [ls("a", 100, (2, 3))], {"a": True}),
    ("same cpuset as another pod: the shared pool", [ls("a", 100, (2, 3)), be("b", 100, cpuset=(2, 3))],
     {"a": False, "b": False}),
    ("every non-reserved CPU: the shared pool", [be("a", 100, numa=(0, 1), cpuset=tuple(range(1, 8)))], {"a": False}),
    ("every CPU, reserved included: the node agent's shared pool", [be("a", 100, numa=(0, 1),
                                                                      cpuset=tuple(range(8)))], {"a": False}),
    ("no cpuset", [be("a", 100)], {"a": False}),
]


@pytest.mark.parametrize("pods, expected", [c[1:] for c in EXCLUSIVE_CASES], ids=[c[0] for c in EXCLUSIVE_CASES])
def test_exclusive_fallback(pods, expected):
    state = make_state([0.5, 0.5], pods, reserved=(0,))
    assert {p.name: p.exclusive for p in state.pods} == expected


def test_exclusive_list_overrides_the_fallback():
    # a and b share a cpuset, so the fallback calls both shared; the caller knows a is exclusive
    state = make_state([0.5, 0.5], [ls("a", 100, (2, 3)), be("b", 100, cpuset=(2, 3)), be("c", 100)],
                       exclusive={"a", "c"})
    assert {p.name: p.exclusive for p in state.pods} == {"a": True, "b": False, "c": False}  # c has no cpuset


# --- hot and cold

HOTSPOT_CASES = [
    ("above high", [0.81, 0.5], [0], [1]),
    ("exactly high is not hot", [0.8, 0.5], [], [1]),
    ("hottest first", [0.85, 0.95, 0.2], [1, 0], [2]),
    ("exactly low is not cold", [0.6, 0.59], [], [1]),
    ("coolest first, ties by id", [0.3, 0.1, 0.3], [], [1, 0, 2]),
]


@pytest.mark.parametrize("loads, hot, cold", [c[1:] for c in HOTSPOT_CASES], ids=[c[0] for c in HOTSPOT_CASES])
def test_hot_and_cold(loads, hot, cold):
    state = make_state(loads)
    assert [h.numa for h in find_hotspots(state, 0.8)] == hot
    assert find_cold(state, 0.6) == cold


def test_hotspot_excess():
    # (0.95 − 0.80) · 4000 = 600 milli-CPU to shed
    [hot] = find_hotspots(make_state([0.95]), 0.8)
    assert hot.excess_milli == pytest.approx(600)
    assert "0.950 > high threshold 0.800" in hot.reason


def test_default_thresholds():
    # 0.80 and 0.60 by default (seed 004: 80 % and 60 %)
    state = make_state([0.81, 0.8, 0.6, 0.59])
    assert [h.numa for h in find_hotspots(state)] == [0] and find_cold(state) == [3]
