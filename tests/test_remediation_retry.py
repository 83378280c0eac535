"""Retrying actions without a result, and giving them up (pure policy).
Timeout 60 s, at most 2 retries → 3 sends in all."""

from __future__ import annotations

from datetime import timedelta

import pytest

from test_remediation_state import NODE, T0, action, be, remember, run
from tidal_remediation.memory import RemediationMemory
from tidal_remediation.policy_settings import PolicySettings
from tidal_policy.action_memory import plan_retries

TIMEOUT, RETRIES = 60.0, 2


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def sent(*actions) -> RemediationMemory:
    memory = RemediationMemory()
    for act in actions:
        memory.record_action(act)
    return memory


RETRY_CASES = [
    # (attempt of the pending action, seconds since it was sent, expected decision)
    ("answer not yet due", 1, 59, None),
    ("first attempt timed out: attempt 2", 1, 60, ("resend", 2)),
    ("second timed out: attempt 3", 2, 61, ("resend", 3)),
    ("third timed out: given up", 3, 60, ("give-up", None)),
    ("third not yet due", 3, 30, None),
]


@pytest.mark.parametrize("attempt, waited, expected", [c[1:] for c in RETRY_CASES], ids=[c[0] for c in RETRY_CASES])
def test_retry_or_give_up(attempt, waited, expected):
    act = action("freeze", "a", measured={"attempt": float(attempt)})
    decision = plan_retries(sent(act).actions, at(waited), TIMEOUT, RETRIES)
    if expected is None:
        assert decision.resend == [] and decision.give_up == []
    elif expected[0] == "resend":
        [again] = decision.resend
        assert decision.give_up == []
        assert again.action_id == act.action_id and again.kind == "freeze" and again.pod == "a"
        assert again.measured["attempt"] == expected[1] and again.measured["sent_at"] == at(waited).timestamp()
        assert again.measured["at"] == act.measured["at"]          # the decision's own time is kept
    else:
        [gave_up] = decision.give_up
        assert decision.resend == []
        assert (gave_up.action_id, gave_up.status) == (act.action_id, "failed")
        assert gave_up.reason == ("gave up: no result for freeze of a after 3 attempt(s), the last sent 60s ago "
                                  "(timeout 60s, max retries 2)")


def test_a_resend_restarts_the_clock():
    act = action("thaw", "a")
    memory = sent(act)
    [again] = plan_retries(memory.actions, at(60), TIMEOUT, RETRIES).resend
    memory.record_action(again)
    assert memory.actions.pending[act.action_id].attempt == 2
    assert plan_retries(memory.actions, at(100), TIMEOUT, RETRIES).resend == []        # 40 s since the re-send
    assert len(plan_retries(memory.actions, at(120), TIMEOUT, RETRIES).resend) == 1


def test_full_cycle_then_give_up_follows_the_failed_rules():
    freeze, thaw = action("freeze", "f"), action("thaw", "t")
    memory = remember(action("freeze", "t", at=T0 - timedelta(minutes=10)))   # t frozen earlier, confirmed
    memory.record_action(freeze)
    memory.record_action(thaw)
    now = 0.0
    for _ in range(RETRIES):
        now += TIMEOUT
        decision = plan_retries(memory.actions, at(now), TIMEOUT, RETRIES)
        assert sorted(a.pod for a in decision.resend) == ["f", "t"] and decision.give_up == []
        for again in decision.resend:
            memory.record_action(again)
    now += TIMEOUT
    decision = plan_retries(memory.actions, at(now), TIMEOUT, RETRIES)
    assert decision.resend == [] and sorted(r.pod for r in decision.give_up) == ["f", "t"]
    for gave_up in decision.give_up:
        memory.record_result(gave_up)
    assert memory.actions.pending == {}
    # a freeze given up counts as not frozen; a thaw given up leaves the pod frozen, to thaw later
    assert not memory.is_frozen(NODE, "f") and memory.is_frozen(NODE, "t")


def test_oldest_first():
    memory = sent(action("freeze", "late", at=at(10)), action("freeze", "early", at=at(0)))
    assert [a.pod for a in plan_retries(memory.actions, at(100), TIMEOUT, RETRIES).resend] == ["early", "late"]


def test_no_retries_allowed_gives_up_at_once():
    memory = sent(action("freeze", "a"))
    decision = plan_retries(memory.actions, at(60), TIMEOUT, 0)
    assert decision.resend == [] and len(decision.give_up) == 1


def test_dry_run_actions_are_never_retried():
    memory = RemediationMemory()
    events = run([0.96], [be("a", 200), be("b", 600)], memory, T0, settings=PolicySettings(dry_run=frozenset({"freeze"})))
    assert len(events) == 2 and memory.actions.pending == {}
    decision = plan_retries(memory.actions, at(3600), TIMEOUT, RETRIES)
    assert decision.resend == [] and decision.give_up == []
