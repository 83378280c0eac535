"""Waiting pods are tried again on what can make room, never on what only
takes it (kube-scheduler's queueing hints): an allocatable that shrinks or
stays, or a node agent's assignment that confirms the decision, leaves them
waiting; an allocatable that grows, or CPUs moved or taken back, tries them."""

from __future__ import annotations

from builders import pod
from tidal_cli.sample import node
from tidal_placement.cache import ClusterCache
from tidal_placement.cycle import cycle
from tidal_schemas import CpuAssignment, NodeAllocatable, NodeAllocatables, Resources
from tidal_schemas.streams import partition_for, stream

PARTITIONS = stream("node.allocatable").partitions


def cluster() -> ClusterCache:
    cache = ClusterCache("c1", permit_timeout_s=3600.0, stale_after_s=0.0)
    cache.apply(node("n1", 1, 2, 4, 1, 64 * 1024, reserved=0), 0.0)
    return cache


def allocatable(cpu_milli: int, memory_mib: int = 64 * 1024) -> NodeAllocatables:
    return NodeAllocatables.of(NodeAllocatable(
        node="n1", policy="factor", capacity=Resources(cpu_milli=4000, memory_mib=64 * 1024),
        allocatable=Resources(cpu_milli=cpu_milli, memory_mib=memory_mib)))


def attempts(cache: ClusterCache, now: float) -> list[tuple[str, str]]:
    return [(d.name, d.outcome) for d in cycle(cache, None, now)]


def waiting_pod(cache: ClusterCache) -> None:
    cache.apply(allocatable(4000), 0.0)
    cache.apply(pod("big", cpu_milli=6000), 0.0)
    assert attempts(cache, 1.0) == [("big", "pending")]
    assert cache.queue.entries["default/big"].waiting_since is not None


def test_a_shrinking_or_unchanged_allocatable_does_not_retry_waiting_pods():
    cache = cluster()
    waiting_pod(cache)
    tried = cache.queue.entries["default/big"].attempts
    for figure in (4000, 3000, 3000):
        assert cache.apply(allocatable(figure), 2.0) is False
        assert not cache.room_changed
        assert attempts(cache, 3.0) == []
    assert cache.queue.entries["default/big"].attempts == tried


def test_a_growing_allocatable_retries_waiting_pods():
    cache = cluster()
    waiting_pod(cache)
    assert cache.apply(allocatable(8000), 2.0) is True
    assert attempts(cache, 3.0) == [("big", "placed")]


def test_memory_growing_alone_is_room_too():
    cache = cluster()
    waiting_pod(cache)
    assert cache.apply(allocatable(4000, memory_mib=128 * 1024), 2.0) is True
    assert cache.room_changed


def test_a_batch_grows_room_when_any_of_its_nodes_grows():
    """A batch holds several nodes' figures: each is taken in, and one node
    growing is room, whatever the others do."""
    cache = cluster()
    waiting_pod(cache)
    partner = next(n for n in (f"m{i}" for i in range(200)) if partition_for(n, PARTITIONS)
                   == partition_for("n1", PARTITIONS))
    cache.apply(node(partner, 1, 2, 4, 1, 64 * 1024, reserved=0), 0.0)
    cache.apply(NodeAllocatables.of(allocatable(4000).items[0].model_copy(update={"node": partner})), 1.0)
    cache.room_changed = False
    figures = [allocatable(3000).items[0], allocatable(4000).items[0].model_copy(update={"node": partner})]
    assert cache.apply(NodeAllocatables.of(*figures), 2.0) is False  # one shrinks, the other stays
    assert cache.state.allocatable("n1").cpu_milli == 3000
    figures = [allocatable(3000).items[0], allocatable(8000).items[0].model_copy(update={"node": partner})]
    assert cache.apply(NodeAllocatables.of(*figures), 3.0) is True
    assert cache.state.allocatable(partner).cpu_milli == 8000 and cache.room_changed


def bound_exclusive(cache: ClusterCache) -> None:
    cache.apply(pod("pinned", cpu_milli=2000, exclusive_cpus=True), 0.0)
    [decision] = list(cycle(cache, None, 1.0))
    assert decision.outcome == "placed"
    cache.apply(pod("pinned", cpu_milli=2000, exclusive_cpus=True, phase="bound", node="n1",
                    decision_id=decision.decision_id, numa_cpus=dict(decision.numa_cpus)), 1.0)
    cache.room_changed = False
    return decision


def test_an_assignment_that_confirms_the_decision_retries_nothing():
    cache = cluster()
    decision = bound_exclusive(cache)
    cache.apply(CpuAssignment(node="n1", pod="default/pinned", cpuset=[0, 1], numa_cpus=dict(decision.numa_cpus),
                              decision_id=decision.decision_id), 2.0)
    assert not cache.room_changed


def test_cpus_moved_or_taken_back_retry_waiting_pods():
    cache = cluster()
    decision = bound_exclusive(cache)
    [(numa, count)] = decision.numa_cpus.items()
    moved = {1 - numa: count}
    cache.apply(CpuAssignment(node="n1", pod="default/pinned", cpuset=[4, 5], numa_cpus=moved,
                              decision_id=decision.decision_id, reason="moved"), 2.0)
    assert cache.room_changed
    cache.room_changed = False
    cache.apply(CpuAssignment(node="n1", pod="default/pinned", cpuset=[], released=True,
                              decision_id=decision.decision_id, reason="deleted"), 3.0)
    assert cache.room_changed


def test_a_waiting_pod_backs_off_however_often_room_appears():
    cache = cluster()
    cache.apply(allocatable(4000), 0.0)
    cache.apply(pod("big", cpu_milli=6000), 0.0)
    entry_of = lambda: cache.queue.entries["default/big"]  # noqa: E731
    tried_at = []
    for step in range(2, 61):  # room appears every half second for 30 s
        now = step / 2
        before = entry_of().attempts
        cache.room_changed = True
        list(cycle(cache, None, now))
        if entry_of().attempts > before:
            tried_at.append(now)
    # kube-scheduler's pod back-off: 1 s after the first try, doubling, at most 10 s
    assert tried_at == [1.0, 2.0, 4.0, 8.0, 16.0, 26.0]
    assert cache.queue.next_due() == 36.0  # room appeared during its back-off: tried when that ends


def test_a_waiting_pod_without_new_room_is_never_due():
    cache = cluster()
    waiting_pod(cache)
    assert cache.queue.next_due() is None
    assert attempts(cache, 100.0) == []


def test_the_back_off_stays_at_its_cap_however_many_tries():
    cache = cluster()
    waiting_pod(cache)
    entry = cache.queue.entries["default/big"]
    entry.attempts = 5000  # a pod waiting for days
    cache.room_changed = True
    assert attempts(cache, 2.0) == []
    assert entry.attempts == 5001 and entry.next_try == 12.0


def test_a_short_permit_does_not_skip_the_back_off():
    # the arrive-only protocol runs placement with a 0.05 s permit: a waiting pod goes back to
    # the sort queue at every cycle, and is tried again only once its back-off is over
    cache = ClusterCache("c1", permit_timeout_s=0.05, stale_after_s=0.0)
    cache.apply(node("n1", 1, 2, 4, 1, 64 * 1024, reserved=0), 0.0)
    cache.apply(pod("big", cpu_milli=16000), 0.0)
    tried_at = []
    for step in range(10, 80):
        now = step / 10
        before = cache.queue.entries["default/big"].attempts
        list(cycle(cache, None, now))
        if cache.queue.entries["default/big"].attempts > before:
            tried_at.append(now)
    assert tried_at == [1.0, 2.0, 4.0]
    assert cache.queue.next_due() == 8.0  # the schedule loop wakes for it then
