"""Every pod placement cannot place gets a pending decision the bridge can
write on the pod (issue 20 item 1): with the nodes of the cluster counted
(the N of "0/N nodes are available") and the nodes filtered out by reason;
a pod held back behind a better waiting pod gets one saying so; an
unchanged pending decision is published again when the pod is tried again
`repeat_s` or more after the last one, never at the pace of every cycle."""

from __future__ import annotations

from datetime import timedelta

from builders import T0, pod
from tidal_cli.sample import node
from tidal_placement.cache import ClusterCache
from tidal_placement.cycle import cycle


def cluster(*nodes) -> ClusterCache:
    cache = ClusterCache("c1", permit_timeout_s=30.0, stale_after_s=0.0)
    for topology in nodes:
        assert cache.apply(topology, 0.0)
    return cache


def four_cpus(name: str):
    return node(name, 1, 1, 4, 1, 64 * 1024, reserved=0)


def run(cache: ClusterCache, now: float, repeat_s: float | None = None, room_changed: bool = True) -> list:
    cache.room_changed = cache.room_changed or room_changed
    return [(d.name, d.outcome, d.reason, dict(d.filtered), d.nodes)
            for d in cycle(cache, None, now, repeat_s=repeat_s)]


def test_a_pod_that_fits_nowhere_names_the_nodes_counted_and_filtered():
    cache = cluster(four_cpus("n1"), four_cpus("n2"), four_cpus("n3"))
    cache.apply(pod("big", cpu_milli=8000), 0.0)
    assert run(cache, 1.0) == [("big", "pending", "0/3 nodes fit: 3 cpu", {"cpu": 3}, 3)]


def test_a_pod_held_back_behind_a_better_waiting_pod_gets_a_decision_saying_so():
    cache = cluster(four_cpus("n1"))
    cache.apply(pod("big", cpu_milli=8000), 0.0)
    assert [d[:2] for d in run(cache, 1.0)] == [("big", "pending")]
    # "small" would fit, but "big" (older, so better) waits for room of its type
    cache.apply(pod("small", cpu_milli=1000, created_at=T0 + timedelta(minutes=1)), 1.5)
    assert run(cache, 2.0) == [("small", "pending", "waiting behind a higher-priority cpu pod", {}, 1)]
    assert run(cache, 3.0) == []  # still held back: said already
    assert cache.queue.entries["default/small"].attempts == 0  # held back, never tried


def test_an_unchanged_pending_decision_is_repeated_only_after_repeat_s():
    cache = cluster(four_cpus("n1"))
    cache.apply(pod("big", cpu_milli=8000), 0.0)
    pending = ("big", "pending", "0/1 nodes fit: 1 cpu", {"cpu": 1}, 1)
    assert run(cache, 1.0, repeat_s=10) == [pending]
    assert run(cache, 5.0, repeat_s=10) == []  # tried again (room changed), 4s after: not yet
    assert run(cache, 11.0, repeat_s=10) == [pending]  # 10s after the last one published
    entry = cache.queue.entries["default/big"]
    assert entry.attempts == 3
    assert run(cache, 12.0, repeat_s=10) == []  # room appeared, but its back-off (4 s after the 3rd try) holds it
    assert entry.attempts == 3
    assert run(cache, 15.0, repeat_s=10, room_changed=False) == []  # back-off over: tried, said 4 s ago
    assert entry.attempts == 4
    assert run(cache, 30.0, repeat_s=10, room_changed=False) == []  # not tried: waiting, nothing changed
    assert entry.attempts == 4
    # the permit timeout (30s after it started waiting at 1.0) sends it back to be tried: repeated
    assert run(cache, 31.0, repeat_s=10, room_changed=False) == [pending]
    # without repeat_s (the default), a decision is published only when its reason changes
    assert run(cache, 100.0) == []


def test_repeated_decisions_have_ids_of_their_own():
    cache = cluster(four_cpus("n1"))
    cache.apply(pod("big", cpu_milli=8000), 0.0)
    ids = []
    for now in (1.0, 2.0, 4.0):  # back-offs of 1 s and 2 s
        cache.room_changed = True  # tried on every cycle, and repeat_s=0 publishes every attempt
        ids += [d.decision_id for d in cycle(cache, None, now, repeat_s=0)]
    assert len(ids) == 3 and len(set(ids)) == 3


def test_a_waiting_pod_does_not_flip_between_held_back_and_its_reason():
    cache = cluster(four_cpus("n1"))
    cache.apply(pod("big", cpu_milli=8000), 0.0)
    cache.apply(pod("bigger", cpu_milli=9000, created_at=T0 + timedelta(minutes=1)), 0.0)
    said = []
    for now in range(1, 200):  # room appears every second; permits (30 s) expire over and over
        said += [(d.name, d.reason) for d in cycle(cache, None, float(now))]
        cache.room_changed = True
    # both are tried in the first cycle and say why they fit nowhere; from then on "bigger" is
    # held back behind "big" every time big waits again, and keeps its reason (no flip to
    # "held back" and back at every permit period)
    assert said == [("big", "0/1 nodes fit: 1 cpu"), ("bigger", "0/1 nodes fit: 1 cpu")]
    assert cache.queue.entries["default/bigger"].attempts > 3  # tried again at each of big's permit expiries


def test_counts_alone_wait_for_the_repeat_but_a_new_filter_is_said_at_once():
    cache = cluster(four_cpus("n1"))
    cache.apply(pod("big", cpu_milli=8000, memory_mib=1024), 0.0)
    assert [d[2] for d in run(cache, 1.0, repeat_s=60)] == ["0/1 nodes fit: 1 cpu"]
    cache.apply(four_cpus("n2"), 1.5)  # another node too small: only the counts move
    assert run(cache, 3.0, repeat_s=60) == []
    cache.apply(node("n3", 1, 2, 8, 1, 1536, reserved=0), 3.5)  # CPU enough, memory (512 MiB) not: a new filter
    assert [d[2] for d in run(cache, 10.0, repeat_s=60)] == ["0/3 nodes fit: 2 cpu, 1 memory"]
    cache.apply(four_cpus("n4"), 10.5)
    assert run(cache, 30.0, repeat_s=60) == []
    # the repeat brings the counts up to date
    assert [d[2] for d in run(cache, 71.0, repeat_s=60)] == ["0/4 nodes fit: 3 cpu, 1 memory"]
