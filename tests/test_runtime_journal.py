"""A replica's journal (tidal_runtime.journal): steps per cluster in the
order taken, a state stream's event carried whole, steps not published put
back ahead of newer ones, and events cut to stay inside a broker's limit."""

from __future__ import annotations

from builders import pod
from tidal_runtime.journal import JOURNAL_EVENT_BYTES, Journal, digest, journal_parts
from tidal_schemas import TenantConfig, decode, encode, make_envelope


def test_steps_are_kept_per_cluster_in_order_and_drained():
    journal = Journal()
    first = make_envelope(pod("a"), cluster="c1", source="t")
    journal.read(first, 1.0, digest(encode(first)))
    journal.step("c2", "cycle", 2.0)
    journal.step("c1", "took", 3.0, "1")
    taken = journal.drain()
    assert taken == {"c1": [("read", 1.0, "pod.lifecycle", f"{first.id} {digest(encode(first))}"),
                            ("took", 3.0, "1", "")], "c2": [("cycle", 2.0, "", "")]}
    assert journal.drain() == {}


def test_a_state_streams_event_is_carried_whole():
    journal = Journal()
    tenant = make_envelope(TenantConfig(tenant="t", quota={"cpu": 1000}), cluster="c1", source="t")
    journal.read(tenant, 5.0)
    [(op, t, stream, carried)] = journal.drain()["c1"]
    assert (op, t, stream) == ("held", 5.0, "tenant.config") and decode(carried) == tenant


def test_steps_not_published_go_back_ahead_of_newer_ones():
    journal = Journal()
    journal.step("c1", "cycle", 1.0)
    drained = journal.drain()["c1"]
    journal.step("c1", "cycle", 2.0)
    journal.put_back("c1", drained)
    assert [t for _, t, _, _ in journal.drain()["c1"]] == [1.0, 2.0]


def test_past_the_bound_the_oldest_unpublished_steps_are_dropped_and_counted(monkeypatch):
    monkeypatch.setattr("tidal_runtime.journal.MAX_UNPUBLISHED_STEPS", 3)
    journal = Journal()
    journal.put_back("c1", [("cycle", float(t), "", "") for t in range(5)])
    assert [t for _, t, _, _ in journal.steps["c1"]] == [2.0, 3.0, 4.0] and journal.lost == {"c1": 2}


def test_events_are_cut_near_the_size_bound_and_lose_no_step():
    steps = [("read", float(i), "score.node", "x" * 1000) for i in range(1000)]
    parts = list(journal_parts(steps))
    assert len(parts) > 1 and [s for part in parts for s in part] == steps
    assert all(sum(48 + len(a) + len(b) for _, _, a, b in part) < JOURNAL_EVENT_BYTES + 1100 for part in parts)
