"""A round plan as `node.action` events: kinds, deterministic ids, the
measured figures, and a round trip through the memory."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest

from test_remediation_state import NODE, T0, be, ls, plan
from tidal_remediation import measured as m
from tidal_remediation.events import action_id, actions_to_events
from tidal_remediation.memory import rebuild
from tidal_schemas import NodeAction, decode, encode, make_envelope

HOT = ([0.96], [be("a", 200), be("b", 600), be("c", 400)])      # freezes b then c


def test_one_event_per_action_in_order():
    events = actions_to_events(plan(*HOT), NODE)
    assert [(e.kind, e.pod, e.node, e.requested_by, e.dry_run) for e in events] == [
        ("freeze", "b", NODE, "remediation", False), ("freeze", "c", NODE, "remediation", False)]
    assert all(e.reason.startswith("NUMA 0 load") for e in events)


def test_requested_by_is_passed_through():
    assert {e.requested_by for e in actions_to_events(plan(*HOT), NODE, requested_by="remediation-canary")} == {
        "remediation-canary"}


ID_CASES = [
    ("same round again: same ids", T0, True),
    ("same instant in another time zone: same ids", T0.astimezone(timezone(timedelta(hours=8))), True),
    ("a later round: new ids", T0 + timedelta(seconds=30), False),
]


@pytest.mark.parametrize("again_at, same", [c[1:] for c in ID_CASES], ids=[c[0] for c in ID_CASES])
def test_action_ids_are_deterministic(again_at, same):
    first = [e.action_id for e in actions_to_events(plan(*HOT), NODE)]
    again = [e.action_id for e in actions_to_events(plan(*HOT, now=again_at), NODE)]
    assert (first == again) is same
    assert len(set(first)) == 2


def test_action_id_depends_on_node_pod_and_kind():
    ids = {action_id(n, p, k, T0.isoformat()) for n in ("n1", "n2") for p in ("a", "b") for k in ("freeze", "thaw")}
    assert len(ids) == 8


def test_freeze_figures():
    # b: 0.96 − 600/4000 = 0.81
    first = actions_to_events(plan(*HOT), NODE)[0]
    assert first.measured == pytest.approx({
        "at": T0.timestamp(), "sent_at": T0.timestamp(), "attempt": 1.0, "numa": 0.0, "load": 0.96,
        "load_before": 0.96, "projected": 0.81, "threshold": 0.8, "pod_cpu_milli": 600.0, "share_milli.0": 600.0})


def test_move_figures():
    # a: 0.95 − 0.1 = 0.85 at the source, 0.2 + 0.1 = 0.3 at NUMA 1, with its 1 exclusive CPU
    move = actions_to_events(plan([0.95, 0.2], [ls("a", 400, (2,)), ls("b", 3000, (0, 1))]), NODE)[0]
    assert (move.kind, move.target_numa, move.cpu_count, move.cpuset) == ("set-cpuset", 1, 1, [])
    assert m.decode_cpus(move.measured) == (2,)
    assert (move.measured["target_numa"], move.measured["target_load"]) == (1.0, 0.2)
    assert move.measured["target_projected"] == pytest.approx(0.3)


def test_thaw_figures_without_a_known_usage():
    [thaw] = actions_to_events(plan([0.2], [be("u", 0, frozen=True)]), NODE)
    assert thaw.kind == "thaw" and "pod_cpu_milli" not in thaw.measured
    assert thaw.measured["threshold"] == 0.6 and m.decode_shares(thaw.measured) == {0: 0.0}


def test_publishing_for_another_node_is_a_bug():
    with pytest.raises(ValueError):
        actions_to_events(plan(*HOT), "n2")


def test_events_survive_the_wire_and_rebuild_the_memory():
    events = actions_to_events(plan(*HOT), NODE)
    wire = [decode(encode(make_envelope(e, cluster="c1", source="remediation"))).payload for e in events]
    assert all(isinstance(e, NodeAction) for e in wire)
    assert rebuild(wire) == rebuild(events)
    frozen = rebuild(wire).frozen[(NODE, "b")]
    assert (frozen.frozen_at, frozen.load, frozen.cpu_milli) == (T0, 0.96, 600.0)
