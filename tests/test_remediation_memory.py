"""The remediation memory: transitions, idempotency and rebuild from the log
(a restart never strands a frozen pod)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from test_remediation_state import NODE, T0, action, ago, be, ls, plan, remember, result, run
from tidal_remediation.memory import RemediationMemory, rebuild
from tidal_schemas import ActionResult, NodeAction, NodeMetrics

FREEZE = action("freeze", "a", numa=0, cpu=600, load=0.9, shares={0: 600.0})
THAW = action("thaw", "a", numa=0, at=T0 + timedelta(seconds=120))
MOVE = action("set-cpuset", "w", numa=0, cpu=400, target_numa=1, cpu_count=2,
              measured={"target_numa": 1.0, "from_cpu.2": 1.0, "from_cpu.3": 1.0})


def state_of(memory: RemediationMemory, pod: str) -> tuple:
    """(frozen?, confirmed?, moved?, pending action kinds) of `pod` on NODE."""
    frozen, moved = memory.frozen.get((NODE, pod)), memory.moved.get((NODE, pod))
    return (frozen is not None, frozen is not None and frozen.confirmed, moved is not None,
            sorted(p.action.kind for p in memory.actions.pending.values() if p.action.pod == pod))


def done(act, status="done"):
    return result(act, status)


# each step is an action sent or a result received, in order
TRANSITION_CASES = [
    ("freeze sent: believed frozen, pending", [FREEZE], (True, False, False, ["freeze"])),
    ("freeze done: confirmed", [FREEZE, done(FREEZE)], (True, True, False, [])),
    ("freeze failed: not frozen", [FREEZE, done(FREEZE, "failed")], (False, False, False, [])),
    ("freeze refused: not frozen", [FREEZE, done(FREEZE, "refused")], (False, False, False, [])),
    ("freeze skipped: not frozen", [FREEZE, done(FREEZE, "skipped")], (False, False, False, [])),
    ("freeze of an unknown pod: forgotten", [FREEZE, done(FREEZE, "unknown-pod")], (False, False, False, [])),
    ("thaw sent: still frozen until done", [FREEZE, done(FREEZE), THAW], (True, True, False, ["thaw"])),
    ("thaw done: no longer frozen", [FREEZE, done(FREEZE), THAW, done(THAW)], (False, False, False, [])),
    ("thaw failed: still frozen", [FREEZE, done(FREEZE), THAW, done(THAW, "failed")], (True, True, False, [])),
    ("thaw of an unknown pod: forgotten", [FREEZE, THAW, done(THAW, "unknown-pod")], (False, False, False, [])),
    ("move sent: moved, pending", [MOVE], (False, False, True, ["set-cpuset"])),
    ("move failed: not moved", [MOVE, done(MOVE, "failed")], (False, False, False, [])),
    ("move done: confirmed", [MOVE, done(MOVE)], (False, False, True, [])),
]


@pytest.mark.parametrize("steps, expected", [c[1:] for c in TRANSITION_CASES], ids=[c[0] for c in TRANSITION_CASES])
def test_transitions(steps, expected):
    memory = rebuild(steps)
    assert state_of(memory, steps[0].pod) == expected
    # the per-node read agrees with the memory after every kind of transition
    assert memory.frozen_on(NODE) == [f for (node, _), f in sorted(memory.frozen.items()) if node == NODE]


def test_what_a_freeze_remembers():
    memory = remember(FREEZE)
    record = memory.frozen[(NODE, "a")]
    assert (record.numa, record.frozen_at, record.load, record.cpu_milli, record.shares) == (
        0, T0, 0.9, 600, ((0, 600.0),))
    assert memory.last_action_at(NODE, 0) == T0


def test_what_a_move_remembers():
    memory = remember(MOVE)
    record = memory.moved[(NODE, "w")]
    assert (record.from_cpuset, record.from_numa, record.to_numa, record.confirmed) == ((2, 3), 0, 1, True)
    # cool-down on the source and on the target
    assert memory.last_action_at(NODE, 0) == T0 and memory.last_action_at(NODE, 1) == T0


def test_freeze_of_a_spanning_pod_cools_every_numa_node_it_is_on():
    memory = remember(action("freeze", "s", cpu=800, shares={0: 600.0, 1: 200.0}))
    assert memory.last_action_at(NODE, 1) == T0


def test_unknown_pod_forgets_every_record_of_it():
    memory = remember(MOVE)
    freeze = action("freeze", "w", at=ago(-60))
    memory.record_action(freeze)
    memory.record_result(result(freeze, "unknown-pod"))
    assert (NODE, "w") not in memory.moved and (NODE, "w") not in memory.frozen


# (with the redelivered copy, without it)
IDEMPOTENT_CASES = [
    ("same action twice", [FREEZE, FREEZE], [FREEZE]),
    ("same result twice", [FREEZE, done(FREEZE), done(FREEZE)], [FREEZE, done(FREEZE)]),
    ("action redelivered after its result", [FREEZE, done(FREEZE), FREEZE], [FREEZE, done(FREEZE)]),
    ("result of an action never sent", [FREEZE, done(THAW)], [FREEZE]),
    ("old attempt after a newer one", [FREEZE, action("freeze", "a", cpu=600, load=0.9, shares={0: 600.0},
                                                      measured={"attempt": 2.0}), FREEZE],
     [FREEZE, action("freeze", "a", cpu=600, load=0.9, shares={0: 600.0}, measured={"attempt": 2.0})]),
]


@pytest.mark.parametrize("events, deduped", [c[1:] for c in IDEMPOTENT_CASES], ids=[c[0] for c in IDEMPOTENT_CASES])
def test_redelivery_changes_nothing(events, deduped):
    assert rebuild(events) == rebuild(deduped)


def test_dry_run_and_foreign_actions_are_not_recorded():
    memory = RemediationMemory()
    assert memory.record_action(FREEZE.model_copy(update={"dry_run": True})).startswith("dry run")
    evict = NodeAction(action_id="e1", node=NODE, kind="evict", pod="x", reason="oversell", requested_by="oversell")
    assert memory.record_action(evict).startswith("ignored")
    assert memory == RemediationMemory()


# --- rebuild from the log

def log_of_a_day() -> list[object]:
    """A mixed log: remediation actions and results, another service's
    action, a metrics sample, a retry, a give-up."""
    f2 = action("freeze", "b", cpu=300, at=T0 + timedelta(seconds=1))
    f2_retry = f2.model_copy(update={"measured": {**f2.measured, "attempt": 2.0, "sent_at": T0.timestamp() + 90}})
    return [
        FREEZE, f2, NodeAction(action_id="e1", node=NODE, kind="evict", pod="x", reason="r", requested_by="oversell"),
        NodeMetrics(node=NODE, sampled_at=T0, interval_s=10), result(FREEZE), f2_retry, MOVE,
        ActionResult(action_id=f2.action_id, node=NODE, kind="freeze", pod="b", status="failed", reason="gave up"),
        result(MOVE), THAW,
    ]


def test_rebuild_gives_the_live_state():
    live = RemediationMemory()
    for event in log_of_a_day():
        if isinstance(event, NodeAction) and event.requested_by == "remediation":
            live.record_action(event)
        elif isinstance(event, ActionResult):
            live.record_result(event)
    rebuilt = rebuild(log_of_a_day())
    assert rebuilt == live
    assert state_of(rebuilt, "a") == (True, True, False, ["thaw"])
    assert state_of(rebuilt, "b") == (False, False, False, [])
    assert state_of(rebuilt, "w") == (False, False, True, [])


def test_rebuild_of_a_prefix_then_the_rest_is_the_whole():
    log = log_of_a_day()
    memory = rebuild(log[:5])
    for event in log[5:]:
        if isinstance(event, NodeAction):
            memory.record_action(event)
        elif isinstance(event, ActionResult):
            memory.record_result(event)
    assert memory == rebuild(log)


def test_restart_while_pods_are_frozen_still_thaws_them_later():
    hot = [be("a", 200), be("b", 600), be("c", 400), ls("web", 2000, (0, 1))]
    memory = RemediationMemory()
    log: list[object] = []
    # round 1, hot: 0.96 → b, then c
    events = run([0.96], hot, memory, T0)
    assert [e.pod for e in events] == ["b", "c"]
    log += events
    for event in events:
        done = result(event)
        memory.record_result(done)
        log.append(done)

    # the service restarts and knows only the log
    restarted = rebuild(log)
    assert restarted == memory
    assert sorted(f.pod for f in restarted.frozen_on(NODE)) == ["b", "c"]

    # ten minutes later the NUMA node is cool: both come back, smallest first
    # 0.40 + 400/4000 = 0.50 → + 600/4000 = 0.65
    cool = [be("a", 200), be("b", 0, frozen=True), be("c", 0, frozen=True), ls("web", 800, (0, 1))]
    later = T0 + timedelta(minutes=10)
    thaws = run([0.4], cool, restarted, later)
    assert [(e.kind, e.pod) for e in thaws] == [("thaw", "c"), ("thaw", "b")]
    for event in thaws:
        restarted.record_result(result(event))
    assert restarted.frozen_on(NODE) == []


def test_replayed_round_gives_the_same_action_ids():
    pods = [be("a", 200), be("b", 600)]
    first = run([0.96], pods, RemediationMemory(), T0)
    again = run([0.96], pods, RemediationMemory(), T0)
    assert [e.action_id for e in first] == [e.action_id for e in again]
    # and recording the replay into the live memory changes nothing
    memory = rebuild(first)
    for event in again:
        memory.record_action(event)
    assert memory == rebuild(first)


def test_plan_after_rebuild_matches_plan_before():
    memory = RemediationMemory()
    run([0.96], [be("a", 200), be("b", 600), be("c", 400)], memory, T0)
    log = [p.action for p in memory.actions.pending.values()]
    later = T0 + timedelta(minutes=5)
    pods = [be("a", 200), be("b", 0, frozen=True), be("c", 0, frozen=True)]
    assert plan([0.3], pods, rebuild(log), now=later) == plan([0.3], pods, memory, now=later)


def test_action_lacking_the_figures_the_memory_needs_is_ignored():
    # a hand-written freeze without `measured`: nothing to rebuild it from, and no crash on restart
    bare = NodeAction(action_id="x1", node=NODE, kind="freeze", pod="a", reason="by hand", requested_by="remediation")
    memory = RemediationMemory()
    assert memory.record_action(bare) == "ignored: x1 lacks measured at, numa, load"
    assert rebuild([bare, FREEZE]) == rebuild([FREEZE])
