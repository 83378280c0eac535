"""Moving latency-sensitive pods off a NUMA node that stays hot with every
best-effort pod frozen (SPEC §E hotspot step 2). NUMA k = CPUs 4k..4k+3
(cores of two threads: {4k, 4k+1}, {4k+2, 4k+3}), 4000 milli-CPU; high 0.80.
A move names the target NUMA node and the CPU count; the node agent picks
the CPUs (test_topology_books)."""

from __future__ import annotations

import pytest

from test_remediation_state import action, ago, be, kinds, ls, make_state, plan, remember
from tidal_remediation.memory import RemediationMemory
from tidal_remediation.moves import choose_target
from tidal_remediation.policy_settings import PolicySettings


def moves(result) -> list[tuple[str, int, int]]:
    """(pod, target NUMA node, exclusive CPUs it asks there) of each move."""
    return [(a.pod, a.target_numa, a.cpu_count) for a in result.actions if a.kind == "set-cpuset"]


MOVE_CASES = [
    # a: 0.95 − 400/4000 = 0.85 still hot; NUMA 1 0.20 + 0.10 = 0.30 (NUMA 2 would be 0.60): → NUMA 1
    # b: 0.85 − 0.20 = 0.65 ≤ 0.80: stop; NUMA 1 0.30 + 0.20 = 0.50 → NUMA 1
    ("lowest usage first, onto the least loaded, until not hot",
     [0.95, 0.2, 0.5], [ls("c", 1000, (2,)), ls("b", 800, (1,)), ls("a", 400, (0,)), be("f", 0, frozen=True)], (),
     [("a", 1, 1), ("b", 1, 1)]),
    # c (300, 2 CPUs) is the smallest: 0.95 − 0.075 = 0.875 → NUMA 1, asking 2 CPUs;
    # a (400): 0.875 − 0.1 = 0.775 ≤ 0.80 → stop
    ("a pod keeps its CPU count",
     [0.95, 0.2], [ls("c", 300, (2, 3)), ls("a", 400, (0,))], (), [("c", 1, 2), ("a", 1, 1)]),
    # src after 0.95 − 0.1 = 0.85; NUMA 1: 0.40 + 0.1 = 0.50, NUMA 2: 0.30 + 0.1 = 0.40 → NUMA 2
    ("target with the lowest load after the move", [0.95, 0.4, 0.3], [ls("a", 400, (0,))], (), [("a", 2, 1)]),
    # 0.85 − 0.1 = 0.75 at the source, 0.80 + 0.1 = 0.90 at the target: never busier than the source
    ("never onto a busier NUMA node", [0.85, 0.9], [ls("a", 400, (0,))], (), []),
    # a (lowest usage) moves: source 0.95 − 0.1 = 0.85, target 0.8 + 0.1 = 0.9 < 0.95; the source is
    # still hot, but NUMA 1 (0.9) is no longer below it: balanced, b stays
    ("balanced: no further move", [0.95, 0.8], [ls("a", 400, (0,)), ls("b", 600, (1,))], (), [("a", 1, 1)]),
    # a pod that alone saturates NUMA 0 would only carry the hotspot over: 0.1 + 1.0 = 1.1 >= 1.0
    ("a hotspot is relieved, not relocated", [1.0, 0.1], [ls("a", 4000, (0, 1, 2, 3))], (), []),
    # two pods share NUMA 0: moving one gives 0.5 and 0.1 + 0.5 = 0.6 < 1.0
    ("sharing pods are split", [1.0, 0.1], [ls("a", 2000, (0, 1)), ls("b", 2000, (2, 3))], (), [("a", 1, 2)]),
    # a needs 4 CPUs, NUMA 1 has 2 free (4 and 5 are x's)
    ("never beyond the target's free CPUs", [0.95, 0.1], [ls("a", 400, (0, 1, 2, 3)), ls("x", 100, (4, 5))], (), []),
    # a needs 4 CPUs, NUMA 1 has 4, 5, 7 (6 is reserved)
    ("reserved CPUs are not free", [0.95, 0.1], [ls("a", 400, (0, 1, 2, 3))], (6,), []),
    # w spans NUMA 0 and 1: it does not run only on the hot one
    ("LS pod on two NUMA nodes is not moved", [0.95, 0.1], [ls("w", 400, (0, 4))], (), []),
    # CPUs shared by two pods are the shared pool, free for the move: 0.95 − 0.1 → NUMA 1
    ("shared-pool CPUs are free", [0.95, 0.1], [ls("a", 400, (0,)), be("s1", 0, numa=(1,), cpuset=(4, 5, 6, 7)),
                                                be("s2", 0, numa=(1,), cpuset=(4, 5, 6, 7))], (), [("a", 1, 1)]),
]


@pytest.mark.parametrize("loads, pods, reserved, expected", [c[1:] for c in MOVE_CASES],
                         ids=[c[0] for c in MOVE_CASES])
def test_moves(loads, pods, reserved, expected):
    result = plan(loads, pods, reserved=reserved)
    assert moves(result) == expected
    assert all(a.kind == "set-cpuset" for a in result.actions)
    assert all(a.cpu_count == len(a.from_cpuset) for a in result.actions)  # these LS pods hold exclusive CPUs


def test_move_projection_and_reason():
    result = plan([0.95, 0.2, 0.5], [ls("a", 400, (0,)), ls("b", 800, (1,))])
    first, second = result.actions
    assert (first.load_before, first.projected_load, first.target_load, first.target_projected) == pytest.approx(
        (0.95, 0.85, 0.2, 0.3))
    assert (second.load_before, second.projected_load, second.target_projected) == pytest.approx((0.85, 0.65, 0.5))
    assert first.from_cpuset == (0,) and second.from_cpuset == (1,)
    assert result.projected == pytest.approx({0: 0.65, 1: 0.5, 2: 0.5})
    assert "move LS pod a, lowest usage first (400 milli-CPU), to NUMA 1 (its load 0.200 < source 0.950; " \
           "projected 0.300, source 0.850)" in first.reason


def test_no_move_while_a_be_pod_runs_there():
    # the round freezes f; whether the LS pod must move is judged on a later measurement
    result = plan([0.99, 0.1], [ls("a", 400, (0,)), be("f", 200)])
    assert kinds(result) == [("freeze", "f")]


def test_no_move_while_a_freeze_there_awaits_its_result():
    memory = RemediationMemory()
    memory.record_action(action("freeze", "f", at=ago(60)))        # sent, no result
    result = plan([0.95, 0.1], [ls("a", 400, (0,)), be("f", 0)], memory)
    assert result.actions == []
    assert any("waiting for the result of freezing f" in n for n in result.notes)


def test_move_once_the_freeze_is_confirmed():
    memory = remember(action("freeze", "f", at=ago(60)))
    result = plan([0.95, 0.1], [ls("a", 400, (0,)), be("f", 0)], memory)
    assert moves(result) == [("a", 1, 1)]


def test_target_cooling_down_is_not_used():
    # NUMA 1 had an action 10 s ago; NUMA 2 (busier but settled) takes the pod
    memory = remember(action("thaw", "t", numa=1, at=ago(10)))
    result = plan([0.95, 0.1, 0.5], [ls("a", 400, (0,))], memory)
    assert moves(result) == [("a", 2, 1)]


def test_frozen_or_busy_ls_pods_are_not_moved():
    memory = RemediationMemory()
    memory.record_action(action("thaw", "b", at=ago(60)))          # b has an unanswered action
    result = plan([0.95, 0.1], [ls("b", 100, (1,)), ls("c", 50, (2,)).model_copy(update={"frozen": True}),
                                ls("a", 400, (0,))], memory)
    assert moves(result) == [("a", 1, 1)]


def test_why_a_pod_was_not_moved():
    result = plan([0.85, 0.9, 0.5], [ls("a", 400, (0, 1)), ls("x", 100, (8, 9, 10, 11))])
    # a needs 2 CPUs: NUMA 1 is busier than the source; NUMA 2 has none free
    [note] = [n for n in result.notes if n.startswith("a:")]
    assert "NUMA 1: load 0.900 is not below the source's 0.850" in note
    assert "NUMA 2: 0 free CPU(s) < 2 needed" in note


def test_no_latency_sensitive_pod_to_move():
    result = plan([0.95, 0.1], [be("f", 0, frozen=True)])
    assert result.actions == []
    assert any("no latency-sensitive pod runs only here" in n for n in result.notes)


def test_moves_count_against_the_budget():
    result = plan([0.99, 0.0, 0.0], [ls(f"l{i}", 100, (i,)) for i in range(4)],
                  settings=PolicySettings(max_actions_per_round=2))
    assert [p for p, _, _ in moves(result)] == ["l0", "l1"]


def test_choose_target_sees_the_cpus_taken_and_promised_so_far():
    state = make_state([0.95, 0.1], [ls("a", 400, (0, 1))])
    loads = {0: 0.95, 1: 0.1}
    target, rejected = choose_target(state.pod("a"), 0, loads, state, {4, 5, 6}, cooling=set())
    assert target is None and rejected == ["NUMA 1: 1 free CPU(s) < 2 needed"]
    target, _ = choose_target(state.pod("a"), 0, loads, state, {4}, cooling=set())
    assert target.numa == 1
    # 3 free, 2 of them promised to a move in flight
    target, rejected = choose_target(state.pod("a"), 0, loads, state, {4}, cooling=set(), promised={1: 2})
    assert target is None and rejected == ["NUMA 1: 1 free CPU(s) < 2 needed"]


def test_cpus_promised_by_an_unanswered_move_are_not_free():
    # x holds 4-6 of NUMA 1: one CPU is free there, and b's move onto NUMA 1 awaits its result
    pods = [ls("b", 100, (1,)), ls("a", 400, (0,)), ls("x", 0, (4, 5, 6))]

    def with_pending_move(count: int):
        memory = RemediationMemory()
        memory.record_action(action("set-cpuset", "b", at=ago(60), target_numa=1, cpu_count=count,
                                    measured={"target_numa": 1.0, "from_cpu.1": 1.0}))
        return plan([0.95, 0.1], pods, memory)

    assert moves(with_pending_move(0)) == [("a", 1, 1)]  # b, a shared pod, takes no CPU of NUMA 1
    result = with_pending_move(1)                         # b takes the last free one
    assert moves(result) == []
    assert any("NUMA 1: 0 free CPU(s) < 1 needed" in n for n in result.notes)
