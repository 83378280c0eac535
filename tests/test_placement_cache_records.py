"""What placement's cache keeps of a decision: what it books and whom it
names, not its explanation (most of placement's memory per pod placed);
of a pod event: the fields placement reads, the repeated parts shared;
and a fenced-out decision of its own is still rolled back, known by its id.
A running pod is kept as its event alone, its ids in 128 bits."""

from __future__ import annotations

import pytest

from builders import pod
from tidal_cli.sample import node
from tidal_placement.cache import ClusterCache
from tidal_placement.cycle import cycle
from tidal_placement.kept import KeptGpu, KeptPod, PodTraits
from tidal_runtime import packed_id, unpacked_id
from tidal_schemas import BindResult
from tidal_schemas.fence import fence_decision


def cluster(nodes: int = 3) -> ClusterCache:
    cache = ClusterCache("c1", permit_timeout_s=3600.0, stale_after_s=0.0)
    for i in range(nodes):
        cache.apply(node(f"n{i}", 1, 2, 4, 1, 64 * 1024, reserved=0), 0.0)
    return cache


def placed_by(cache: ClusterCache, leader: str, epoch: int, name: str = "p"):
    assert cache.apply_decision(fence_decision(epoch, leader), leader, 0.0)
    cache.apply(pod(name, cpu_milli=2000), 0.0)
    (decision,) = cycle(cache, None, 1.0)
    assert decision.outcome == "placed" and decision.runners_up and decision.chosen is not None
    return decision


def test_the_record_keeps_what_a_decision_books_not_its_explanation():
    cache = cluster()
    decision = placed_by(cache, "me", 1)
    kept = cache.records.get("default/p").decision
    assert (kept.decision_id, kept.node, kept.requests, dict(kept.numa_cpus), list(kept.gpus), kept.epoch,
            kept.leader) == \
        (decision.decision_id, decision.node, decision.requests, decision.numa_cpus, decision.gpus, 1, "me")
    for explanation in ("chosen", "runners_up", "filtered", "reason", "nodes"):
        assert not hasattr(kept, explanation)
    assert cache.apply_decision(decision, "me", 1.5)  # read back from the log: kept the same way
    assert cache.records.get("default/p").decision == kept
    assert cache.state.held("default/p").cpu_milli == 2000  # and it still books the pod


def test_an_own_decision_fenced_out_is_rolled_back():
    cache = cluster()
    decision = placed_by(cache, "me", 1)
    assert cache.state.held("default/p") is not None
    assert cache.apply_decision(fence_decision(2, "other"), "me", 2.0)  # another replica took over first
    assert not cache.apply_decision(decision, "me", 2.5)  # ours, read back after it: not admitted
    assert cache.state.held("default/p") is None  # our assumption is undone
    assert "default/p" in cache.queue.entries  # and the pod waits for the new leader


def test_the_record_keeps_a_pods_fields_and_shares_what_repeats():
    cache = cluster()
    cache.apply(pod("a", cpu_milli=2000, tenant="t1"), 0.0)
    cache.apply(pod("b", cpu_milli=2000, tenant="t1"), 0.0)
    a, b = cache.records.pod("default/a"), cache.records.pod("default/b")
    event = pod("a", cpu_milli=2000, tenant="t1")
    # the traits are read through the pod, under the event's names; a kept list is a tuple
    kept_names = set(KeptPod.__slots__) - {"key", "traits", "created", "packed_uid", "packed_decision_id"}
    for name in kept_names | {"uid", "decision_id"} | set(PodTraits.__slots__) | {"created_at"}:
        kept = getattr(a, name)
        assert (list(kept) if isinstance(kept, tuple) else kept) == getattr(event, name), name
    assert a.event_key() == event.event_key() == "default/a" and a.name == "a"
    assert cache.queue.entries["default/a"].key is a.key and next(k for k in cache.records if k == a.key) is a.key
    assert a.requests is b.requests and a.gpu is b.gpu and a.tenant is b.tenant and a.traits is b.traits
    assert cache.queue.entries["default/a"].pod is a  # the queue holds the kept pod, not the event


def test_a_nodes_gpus_are_kept_as_what_grouping_reads():
    cache = ClusterCache("c1", permit_timeout_s=3600.0, stale_after_s=0.0)
    topology = node("g0", 1, 2, 4, 1, 64 * 1024, reserved=0, gpus=[("A100", 81920), ("T4", 16384)])
    cache.apply(topology, 0.0)
    kept = cache.inventory["g0"]
    assert [(g.id, g.model, g.kind, g.healthy) for g in kept] == \
        [(g.id, g.model, g.kind, g.healthy) for g in topology.gpus] and len(kept) == 2
    assert all(isinstance(g, KeptGpu) and not hasattr(g, "__dict__") for g in kept)  # slotted, no pydantic model


def test_a_pod_the_cluster_runs_keeps_no_decision_whatever_order_the_streams_are_read_in():
    # a cluster of pods Tidal placed would otherwise keep each pod's decision for life
    cache = cluster()
    decision = placed_by(cache, "me", 1)
    booked = cache.state.held("default/p")
    running = pod("p", phase="running", cpu_milli=2000, node=decision.node, decision_id=decision.decision_id)
    cache.apply(running, 2.0)
    # nothing but the pod is kept: no record around it, no decision, failed ids or tries
    assert cache.records.pod("default/p").phase == "running" and list(cache.records.records()) == []
    record = cache.records.get("default/p")
    assert (record.decision, record.failed, record.tries) == (None, frozenset(), 0)
    assert cache.state.held("default/p") == booked  # the cluster's holding is what the decision booked
    # a rebuild reading the pod before its decision
    rebuilt = cluster()
    assert rebuilt.apply_decision(fence_decision(1, "me"), "other", 0.0)
    rebuilt.apply(running, 0.0)
    assert rebuilt.apply_decision(decision, "other", 0.5)
    assert rebuilt.records.get("default/p").decision is None
    assert rebuilt.state.held("default/p") == booked and "default/p" not in rebuilt.queue.entries


def test_a_bind_refused_as_the_pod_is_bound_holds_it_there_until_its_own_event_says_more():
    cache = cluster()
    first = placed_by(cache, "me", 1)
    cache.rollback("default/p", 61.0)  # its bind outlived the timeout: the pod waits again
    (second,) = cycle(cache, None, 100.0)
    assert second.outcome == "placed" and second.decision_id != first.decision_id
    # the first bind went through late, so the second is refused: the pod is bound to the first's node
    cache.apply(BindResult(decision_id=second.decision_id, namespace="default", name="p", node=second.node,
                           ok=False, reason=f"pod default/p is already bound to node {first.node}",
                           bound_to=first.node), 101.0)
    held = cache.state.held("default/p")
    assert (held.node, held.cpu_milli) == (first.node, 2000) and "default/p" not in cache.queue.entries
    assert list(cycle(cache, None, 200.0)) == []  # never placed again, so never refused again
    running = pod("p", phase="running", cpu_milli=2000, node=first.node, decision_id=first.decision_id)
    cache.apply(running, 202.0)  # its own event: what the cluster says it holds
    assert cache.state.held("default/p") == held and cache.records.pod("default/p").decision_id == first.decision_id
    # refused for another reason, a pod waits to be placed again, as before
    cache.apply(pod("q", cpu_milli=2000), 203.0)
    (third,) = cycle(cache, None, 204.0)
    cache.apply(BindResult(decision_id=third.decision_id, namespace="default", name="q", node=third.node,
                           ok=False, reason="node gone"), 205.0)
    assert "default/q" in cache.queue.entries and cache.state.held("default/q") is None


_UID = "0f8a6c2e-5b1d-4e7a-9c3f-2d6b8e1a4c70"


@pytest.mark.parametrize("text", ["", "pod-1", _UID, _UID.upper(), _UID.replace("-", ""), "+" + _UID[1:],
                                  _UID[:9] + "_" + _UID[10:], " " + _UID[1:], "-" + _UID[1:]])
def test_an_id_is_kept_in_128_bits_only_in_its_canonical_form_and_given_back_as_it_was(text):
    packed = packed_id(text)
    assert unpacked_id(packed) == text
    assert isinstance(packed, int) == (text == _UID)  # whatever else int() would read stays text: one to one


def test_a_running_pods_ids_are_kept_packed_and_read_as_text():
    cache = cluster()
    decision_id = "7d0c3b9e-1f2a-5c4d-8e6f-0a1b2c3d4e5f"
    cache.apply(pod("p", phase="running", cpu_milli=2000, node="n0", uid=_UID, decision_id=decision_id), 0.0)
    kept = cache.records.pod("default/p")
    assert isinstance(kept.packed_uid, int) and isinstance(kept.packed_decision_id, int)
    assert (kept.uid, kept.decision_id) == (_UID, decision_id)
    cache.apply(pod("p", phase="deleted", uid=_UID), 1.0)
    assert packed_id(_UID) in cache.gone  # and a late decision for it books nothing


def _kept_under(cache: ClusterCache, key: str) -> list[str]:
    """The key objects the pod is kept under: its record's, its kept pod's and its holding's."""
    return [next(k for k in cache.records if k == key), cache.records.pod(key).key,
            next(k for k in cache.state.holdings() if k == key)]


def test_a_pod_is_kept_under_one_key_object_whatever_event_named_it_since():
    # keys are not interned: each event's key is a new string, and every table keeps the first
    cache = cluster()
    decision = placed_by(cache, "me", 1)
    first = cache.records.pod("default/p").key
    cache.apply(BindResult(decision_id=decision.decision_id, namespace="default", name="p", node=decision.node,
                           ok=True), 1.0)
    cache.apply(pod("p", phase="running", cpu_milli=2000, node=decision.node, decision_id=decision.decision_id), 2.0)
    assert all(k is first for k in _kept_under(cache, "default/p"))
    # a rebuild reading the decision before the pod: the decision's key is the one kept
    rebuilt = cluster()
    assert rebuilt.apply_decision(fence_decision(1, "me"), "other", 0.0)
    assert rebuilt.apply_decision(decision, "other", 0.5)
    first = next(k for k in rebuilt.records if k == "default/p")
    rebuilt.apply(pod("p", phase="running", cpu_milli=2000, node=decision.node, decision_id=decision.decision_id), 1.0)
    assert all(k is first for k in _kept_under(rebuilt, "default/p"))


def test_a_pod_made_again_under_its_name_gets_decision_ids_of_its_own():
    # a StatefulSet's pod deleted and made again: the same name, a new uid, no tries yet
    cache = cluster()
    assert cache.apply_decision(fence_decision(1, "me"), "me", 0.0)
    cache.apply(pod("web-0", uid="u1", cpu_milli=2000), 0.0)
    (first,) = cycle(cache, None, 1.0)
    cache.apply(pod("web-0", uid="u1", phase="deleted"), 2.0)
    cache.apply(pod("web-0", uid="u2", cpu_milli=2000), 2.0)
    (second,) = cycle(cache, None, 3.0)
    assert (first.outcome, second.outcome, first.uid, second.uid) == ("placed", "placed", "u1", "u2")
    assert second.decision_id != first.decision_id  # else a node agent reads it as the first's, redelivered


def test_a_predecessors_deletion_read_after_its_successor_leaves_the_successor_booked():
    # a pod made again under its name, its predecessor's deletion read late: the room the
    # successor holds stays booked (freed, a second pod could be placed on top of it)
    cache = cluster(1)
    cache.apply(pod("web-0", uid="u2", phase="running", node="n0", cpu_milli=2000), 0.0)
    held = int(cache.state.cpu_free[0])
    cache.apply(pod("web-0", uid="u1", phase="deleted", node="n0", cpu_milli=2000), 1.0)
    assert int(cache.state.cpu_free[0]) == held and cache.records.get("default/web-0").pod.uid == "u2"
    cache.apply(pod("web-0", uid="u2", phase="deleted", node="n0", cpu_milli=2000), 2.0)
    assert int(cache.state.cpu_free[0]) == held + 2000 and "default/web-0" not in cache.records
    cache.apply(pod("old", phase="running", node="n0", cpu_milli=1000), 3.0)  # no uids: told apart by name only
    cache.apply(pod("old", phase="deleted", node="n0"), 4.0)
    assert int(cache.state.cpu_free[0]) == held + 2000
