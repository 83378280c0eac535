"""Freezing best-effort pods on a hot NUMA node, and the round's guard rails
(SPEC §E hotspot step 1). Capacity of a NUMA node: 4 CPUs = 4000 milli-CPU;
high threshold 0.80."""

from __future__ import annotations

from dataclasses import replace

import pytest

from test_remediation_state import NODE, SETTINGS, T0, action, ago, be, kinds, ls, plan, remember, result
from tidal_remediation.events import actions_to_events
from tidal_remediation.memory import RemediationMemory
from tidal_remediation.policy_settings import PolicySettings

FREEZE_CASES = [
    # 0.96 − 600/4000 = 0.81 > 0.80 → 0.81 − 400/4000 = 0.71: stop
    ("highest usage first, until not hot",
     [0.96], [be("a", 200), be("b", 600), be("c", 400)], ["b", "c"], [0.81, 0.71]),
    # 0.85 − 0.15 = 0.70 after the first
    ("one is enough", [0.85], [be("a", 200), be("b", 600)], ["b"], [0.70]),
    ("tie on usage: by name", [0.85], [be("y", 800), be("x", 800)], ["x"], [0.65]),
    # the LS pod uses the most but is never a candidate; 0.95 − 0.05 = 0.90, still hot, no BE left
    ("LS never frozen", [0.95], [ls("web", 2000, (0, 1)), be("a", 200)], ["a"], [0.90]),
    ("idle BE pod skipped: freezing it frees nothing", [0.85], [be("idle", 0), be("a", 400)], ["a"], [0.75]),
    ("BE pod already frozen (agent says so) skipped", [0.85], [be("f", 900, frozen=True), be("a", 400)],
     ["a"], [0.75]),
    ("BE pod on another NUMA node ignored", [0.85, 0.5], [be("far", 3000, numa=(1,)), be("a", 400)],
     ["a"], [0.75]),
    # s: 800 over CPUs 0,1,2 | 4 → 600 on NUMA 0; a: 700 → a first (700 > 600)
    # 0.99 − 700/4000 = 0.815 → 0.815 − 600/4000 = 0.665
    ("highest share on the hot NUMA node, not total usage",
     [0.99, 0.5], [be("s", 800, numa=(0, 1), cpuset=(0, 1, 2, 4)), be("a", 700)], ["a", "s"], [0.815, 0.665]),
    # 4 × 200: 0.99 → 0.94 → 0.89 → 0.84, then the budget of 3 is spent
    ("at most 3 actions a round", [0.99], [be(f"p{i}", 200) for i in range(4)], ["p0", "p1", "p2"],
     [0.94, 0.89, 0.84]),
    ("nothing hot: nothing to do", [0.80, 0.7], [be("a", 900)], [], []),
]


@pytest.mark.parametrize("loads, pods, frozen, projected", [c[1:] for c in FREEZE_CASES],
                         ids=[c[0] for c in FREEZE_CASES])
def test_freeze_order_and_stop(loads, pods, frozen, projected):
    result = plan(loads, pods)
    assert kinds(result) == [("freeze", p) for p in frozen]
    assert [a.projected_load for a in result.actions] == pytest.approx(projected)
    assert all(a.numa == 0 and a.threshold == 0.8 and a.measured_load == loads[0] for a in result.actions)


def test_stop_exactly_at_the_threshold():
    # binary-exact: 0.875 − 500/4000 = 0.75, not above high 0.75 → stop after one
    result = plan([0.875], [be("a", 500), be("b", 500)], settings=PolicySettings(high_threshold=0.75,
                                                                                low_threshold=0.5))
    assert kinds(result) == [("freeze", "a")]
    assert result.projected[0] == 0.75


def test_freezing_a_spanning_pod_relieves_every_numa_node_it_is_on():
    # s: 600 on NUMA 0, 200 on NUMA 1 → 0.9 − 0.15 = 0.75 and 0.5 − 0.05 = 0.45
    result = plan([0.9, 0.5], [be("s", 800, numa=(0, 1), cpuset=(0, 1, 2, 4))])
    assert kinds(result) == [("freeze", "s")]
    assert result.projected == pytest.approx({0: 0.75, 1: 0.45})
    assert result.actions[0].shares == pytest.approx({0: 600, 1: 200})


def test_hottest_numa_node_first():
    # NUMA 1 (0.95) before NUMA 0 (0.85); the budget of 1 goes to NUMA 1
    result = plan([0.85, 0.95], [be("a", 400), be("b", 400, numa=(1,))],
                  settings=PolicySettings(max_actions_per_round=1))
    assert kinds(result) == [("freeze", "b")]
    assert "max actions per round (1) reached" in result.notes


def test_reason_names_the_rule_and_the_loads():
    [act] = plan([0.85], [be("a", 600)]).actions
    assert act.reason == ("NUMA 0 load 0.850 > high 0.800: freeze BE pod a, highest usage first "
                          "(600 of its 600 milli-CPU on NUMA 0); projected 0.850 - 600/4000 = 0.700")
    assert (act.load_before, act.pod_cpu_milli) == (0.85, 600)


# --- guard rails

def test_pod_frozen_in_memory_is_not_frozen_again():
    memory = remember(action("freeze", "a", cpu=900))
    assert kinds(plan([0.85], [be("a", 0), be("b", 400)], memory, now=ago(-60))) == [("freeze", "b")]


def test_confirmed_freeze_of_a_pod_measured_running_is_not_believed():
    # memory says a is frozen, but the agent measures it running at 900: it is frozen again
    memory = remember(action("freeze", "a", cpu=900))
    assert kinds(plan([0.85], [be("a", 900)], memory, now=ago(-60))) == [("freeze", "a")]


@pytest.mark.parametrize("acted_s_ago, frozen_again", [
    (5, False),   # the sample's window (T0 − 10 s … T0) began before the freeze: its 900 milli are of before
    (10, True),   # the window began as the agent froze it: a pod measured running was thawed by hand
    (15, True),
])
def test_a_confirmed_freeze_is_doubted_only_by_a_sample_measured_wholly_after_it(acted_s_ago, frozen_again):
    memory = RemediationMemory()
    freeze = action("freeze", "a", cpu=900, at=ago(60))
    memory.record_action(freeze)
    memory.record_result(result(freeze).model_copy(update={"acted_at": ago(acted_s_ago)}))
    assert kinds(plan([0.85], [be("a", 900)], memory)) == ([("freeze", "a")] if frozen_again else [])


def test_pod_with_an_unanswered_action_is_left_alone():
    memory = RemediationMemory()
    memory.record_action(action("thaw", "a", at=ago(60)))   # a thaw still pending for a
    assert kinds(plan([0.85], [be("a", 800), be("b", 400)], memory)) == [("freeze", "b")]


COOL_DOWN_CASES = [
    ("10 s after the last action: cooling", 10, []),
    ("29 s after: cooling", 29, []),
    ("30 s after: free again", 30, [("freeze", "a")]),
]


@pytest.mark.parametrize("age, expected", [c[1:] for c in COOL_DOWN_CASES], ids=[c[0] for c in COOL_DOWN_CASES])
def test_cool_down_per_numa_node(age, expected):
    memory = remember(action("freeze", "old", numa=0, at=ago(age)))
    result = plan([0.9, 0.9], [be("a", 600), be("b", 600, numa=(1,))], memory)
    # NUMA 1 never acted on: always free; NUMA 0 waits out its 30 s
    assert [k for k in kinds(result) if k[1] != "b"] == expected
    assert ("freeze", "b") in kinds(result)
    assert any(n.startswith("NUMA 0: cool-down") for n in result.notes) == (not expected)


def test_dry_run_marks_actions_and_leaves_memory_untouched():
    settings = PolicySettings(dry_run=frozenset({"freeze"}))
    memory = RemediationMemory()
    result = plan([0.96], [be("a", 200), be("b", 600), be("c", 400)], memory, settings)
    assert kinds(result) == [("freeze", "b"), ("freeze", "c")]     # the same decisions as for real
    assert all(a.dry_run for a in result.actions)
    events = actions_to_events(result, NODE)
    assert all(e.dry_run for e in events)
    for event in events:
        memory.record_action(event)
    assert memory == RemediationMemory()
    # so the next round, without cool-down, decides the same again
    assert kinds(plan([0.96], [be("a", 200), be("b", 600), be("c", 400)], memory, settings)) == kinds(result)


def test_disabled_does_nothing():
    result = plan([0.99], [be("a", 900)], settings=replace(SETTINGS, enabled=False))
    assert result.actions == [] and result.notes == ["remediation disabled"]


def test_plan_is_pure():
    memory = remember(action("freeze", "x", at=ago(600)))
    before = (dict(memory.frozen), dict(memory.actions.pending), dict(memory.actions.last_acted))
    first = plan([0.96], [be("a", 200), be("b", 600)], memory)
    assert (dict(memory.frozen), dict(memory.actions.pending), dict(memory.actions.last_acted)) == before
    assert plan([0.96], [be("a", 200), be("b", 600)], memory) == first


@pytest.mark.parametrize("bad", [dict(low_threshold=0.8), dict(high_threshold=1.2), dict(max_actions_per_round=0),
                                 dict(cool_down_s=-1), dict(action_timeout_s=0), dict(max_retries=-1)])
def test_settings_are_validated(bad):
    with pytest.raises(ValueError):
        PolicySettings(**bad)


def test_round_time_is_recorded():
    result = plan([0.85], [be("a", 600)])
    assert result.at == T0 and result.measured == {0: 0.85}
