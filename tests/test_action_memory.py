"""The one memory of node actions that oversell and remediation share
(`tidal_policy.action_memory`): transitions, cool-down, and oversell's log
rebuilt from what it published equal to the one it lived through."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tidal_oversell.node_state import ActionLog
from tidal_policy.action_memory import ATTEMPT, SENT_AT, ActionMemory
from tidal_schemas import ActionResult, NodeAction

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def act(action_id: str = "a1", kind: str = "evict", pod: str | None = "ns/p", node: str = "n1",
        dry_run: bool = False, **measured: float) -> NodeAction:
    taint = {"taint_key": "tidal.dev/memory-pressure"} if kind in ("taint", "untaint") else {}
    return NodeAction(action_id=action_id, node=node, kind=kind, pod=pod, reason="test", measured=measured,
                      dry_run=dry_run, requested_by="oversell", **taint)


def answer(action: NodeAction, status: str = "done") -> ActionResult:
    return ActionResult(action_id=action.action_id, node=action.node, kind=action.kind, pod=action.pod, status=status)


SENT_CASES = [
    # (what happened before, the action sent now, outcome, pending attempt after)
    ("first send", [], act(), "new", 1),
    ("dry run is never remembered", [], act(dry_run=True), "dry-run", None),
    ("a redelivered send", [act()], act(), "seen", 1),
    ("a later attempt", [act()], act(**{ATTEMPT: 2.0}), "retry", 2),
    ("an older attempt after a newer one", [act(**{ATTEMPT: 3.0})], act(**{ATTEMPT: 2.0}), "seen", 3),
]


@pytest.mark.parametrize("before, now, outcome, attempt", [c[1:] for c in SENT_CASES], ids=[c[0] for c in SENT_CASES])
def test_sent(before, now, outcome, attempt):
    memory = ActionMemory()
    for earlier in before:
        memory.sent(earlier, T0)
    assert memory.sent(now, T0 + timedelta(seconds=5)) == outcome
    pending = memory.pending.get(now.action_id)
    assert (pending.attempt if pending else None) == attempt


def test_an_answer_settles_once_and_a_late_redelivery_changes_nothing():
    memory = ActionMemory()
    memory.sent(act(), T0)
    assert memory.answered(answer(act(), "failed")).action == act()
    assert memory.settled == {"a1": "failed"} and memory.pending == {}
    assert memory.answered(answer(act())) is None and memory.settled == {"a1": "failed"}
    assert memory.sent(act(), T0) == "settled" and memory.pending == {}


def test_the_send_time_the_action_carries_wins_over_the_one_given():
    memory = ActionMemory()
    memory.sent(act(**{SENT_AT: (T0 + timedelta(seconds=30)).timestamp()}), T0)
    assert memory.pending["a1"].sent_at == T0 + timedelta(seconds=30)


def test_cool_down_keeps_the_latest_action_of_a_scope():
    memory = ActionMemory()
    memory.acted(("c1", "n1"), T0 + timedelta(seconds=10))
    memory.acted(("c1", "n1"), T0)  # an older one read late does not shorten it
    assert memory.cooling_down(("c1", "n1"), T0 + timedelta(seconds=69), 60)
    assert not memory.cooling_down(("c1", "n1"), T0 + timedelta(seconds=70), 60)
    assert not memory.cooling_down(("c1", "n2"), T0, 60)


def test_forget_settles_every_pending_action_of_the_pod():
    memory = ActionMemory()
    memory.sent(act("a1"), T0)
    memory.sent(act("a2", kind="taint", pod=None), T0)
    memory.forget("n1", "ns/p", "unknown-pod")
    assert set(memory.pending) == {"a2"} and memory.settled == {"a1": "unknown-pod"}


def oversell_history() -> list[tuple[object, datetime]]:
    """What oversell sent and heard, with the time each was logged."""
    evict_a = act("e1", pod="ns/a", **{SENT_AT: T0.timestamp()})
    evict_b = act("e2", pod="ns/b", **{SENT_AT: (T0 + timedelta(seconds=20)).timestamp()})
    taint = act("t1", kind="taint", pod=None, **{SENT_AT: T0.timestamp()})
    return [(taint, T0), (evict_a, T0), (answer(evict_a, "failed"), T0 + timedelta(seconds=3)),
            (evict_b, T0 + timedelta(seconds=20)), (answer(taint), T0 + timedelta(seconds=21))]


def test_oversells_log_rebuilt_from_the_stream_equals_the_lived_one():
    lived = ActionLog()
    for event, at in oversell_history():  # live: sent at the sample's time
        (lived.record if isinstance(event, NodeAction) else lived.result)("c1", event, *(
            (at,) if isinstance(event, NodeAction) else ()))
    rebuilt = ActionLog()
    events = oversell_history()
    # the log read back: every action first, then every result, each stamped later by the broker
    for event, at in [e for e in events if isinstance(e[0], NodeAction)] + \
                     [e for e in events if isinstance(e[0], ActionResult)]:
        if isinstance(event, NodeAction):
            rebuilt.record("c1", event, at + timedelta(seconds=2))
        else:
            rebuilt.result("c1", event)
    assert rebuilt == lived
    assert lived.tainted == {("c1", "n1"): True}
    assert lived.evictions == {("c1", "ns/b"): T0 + timedelta(seconds=20)}  # the failed one may be asked again
    assert lived.cooling_down("c1", "n1", T0 + timedelta(seconds=79), 60)
