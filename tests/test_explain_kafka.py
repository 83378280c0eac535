"""`tidal explain` on Kafka, which has no key index: the decision log's one
partition (and the pod's partition of `pod.lifecycle`) read back from the
end a window at a time, so the records read are as many for a short log
as for a long one. The logs are those of test_explain_index (N, then 10N
other pods' decisions before — or, for a bound pod, after — the pod's own),
and the answer is the whole-log read's, fences included.

Records are counted where the Kafka backend turns them into messages
(`kafka_backend.raw_message`): what the broker handed over, read or not.
No consumer group is joined (partitions are assigned), and each test has
its own namespace on the session's broker."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from conftest import make_bus
from test_explain_index import CLUSTER, N, bound_log, decision, fenced_log, pending_log
from tidal_bus.kafka_tail import PartitionTail, window_spans
from tidal_cli.decision_lookup import read_whole_log
from tidal_cli.decision_tail import CLOCK_SLACK, FENCE_MARGIN, Seen, TailLookup, counts
from tidal_schemas import PlacementDecisions


class Handed:
    """Counts the records the Kafka backend makes messages of, while counting."""

    def __init__(self, monkeypatch) -> None:
        import tidal_bus.kafka_backend as backend

        self.count, self.counting, made = 0, False, backend.raw_message

        def counted(record, **options):
            self.count += self.counting
            return made(record, **options)

        monkeypatch.setattr(backend, "raw_message", counted)


MARGIN = 8  # events read before a fenced decision to trust its fence: within the first window, to show it flat
# The bound pod's decision is looked for before the first decision stamped after its own event: the test's
# filler follows within the default slack for clocks (5 s), so none is given here.
SLACK = timedelta(0)


async def explained(url: str, namespace: str, build, size: int, handed: Handed, scan_limit: int = 0,
                    margin: int = FENCE_MARGIN, slack: timedelta = CLOCK_SLACK, whole: bool = True):
    """(the tail lookup, the records handed to it, the whole-log read or None) of ns/web."""
    async with make_bus(url, namespace, cluster=CLUSTER) as bus:
        await build(bus, size)
        await bus.publish(PlacementDecisions.of(decision("web", "d-elsewhere")), cluster="other")
        handed.count, handed.counting = 0, True
        lookup = TailLookup(bus, CLUSTER, "ns", "web", scan_limit, margin=margin, slack=slack)
        found = await lookup.find()
        handed.counting = False
        assert lookup.records == handed.count  # the tail counts what the backend handed over
        return found, handed.count, await read_whole_log(bus, CLUSTER, "ns", "web") if whole else None


@pytest.mark.parametrize("build, want", [(pending_log, "d-web-2"), (bound_log, "d-web"), (fenced_log, "d-web-A")],
                         ids=["pending-in-a-batch", "bound-then-others", "fenced"])
def test_explain_on_kafka_reads_as_many_records_whatever_the_logs_length(kafka_server, namespace, build, want,
                                                                         monkeypatch):
    handed = Handed(monkeypatch)
    small = asyncio.run(explained(kafka_server.url, namespace + "s", build, N, handed, margin=MARGIN, slack=SLACK))
    large = asyncio.run(explained(kafka_server.url, namespace + "l", build, 10 * N, handed, margin=MARGIN,
                                  slack=SLACK, whole=False))
    assert small[2].decision == small[0].decision  # the whole log's answer (read once: the count is for the lookup)
    for found, _, _ in (small, large):
        assert found.decision is not None and found.decision.decision_id == want and found.complete
    if build is bound_log:
        assert small[0].pod is not None and small[0].pod.decision_id == "d-web"  # its own event, by its partition
    assert small[1] == large[1], (small[1], large[1])  # flat in the log's length
    assert small[1] < N  # fewer than the filler alone, and 10N more of it add nothing


def test_a_fenced_decision_is_trusted_after_the_margin(kafka_server, namespace, monkeypatch):
    # the default margin (256 events) is over the small log: read back to its leader's fence, the log's start
    handed = Handed(monkeypatch)
    found, records, whole = asyncio.run(explained(kafka_server.url, namespace, fenced_log, N, handed))
    assert found.decision == whole.decision and found.decision.decision_id == "d-web-A"
    assert N < records < N + 16


def test_the_scan_limit_stops_the_tail_and_says_so(kafka_server, namespace, monkeypatch):
    handed = Handed(monkeypatch)
    found, records, _ = asyncio.run(explained(kafka_server.url, namespace, pending_log, 2 * N, handed, 3))
    # the pod's latest decision is the 4th event from the end (and one of another cluster after it)
    assert found.decision is None and not found.complete and records <= 3 + 4


def test_windows_cover_the_partition_from_its_end_back():
    # 16, then 32, then the rest: every position once, newest window first
    assert list(window_spans(1, 100, 16)) == [(85, 100), (53, 84), (1, 52)]
    assert list(window_spans(5, 20, 4, widest=8)) == [(17, 20), (9, 16), (5, 8)]
    assert list(window_spans(1, 0)) == []


# what was read before a decision at position 10, as (position, epoch, leader, fence?)
SHORT = MARGIN - 1


def F(position: int, epoch: int, leader: str) -> Seen:
    return Seen(position, epoch, leader, fence=True)


@pytest.mark.parametrize("epoch, leader, seen, read_back, at_start, want", [
    (1, "A", [F(2, 1, "A")], SHORT, False, True),                     # its fence read, none higher after it
    (1, "A", [F(2, 1, "A"), F(5, 2, "B")], SHORT, False, False),      # B's epoch 2 came between: deposed
    (1, "A", [Seen(6, 2, "B")], SHORT, False, False),                  # a decision of epoch 2 before it: B fenced first
    (1, "A", [F(12, 2, "B")], SHORT, False, None),                     # B's fence is after it: read on for A's
    (1, "A", [F(12, 2, "B")], MARGIN, False, True),                # … unless the margin was read without one
    (1, "A", [], SHORT, True, False),                                  # the whole log, no fence of its own
    (1, "A", [F(5, 1, "B")], SHORT, False, None),                      # B's claim of epoch 1; A's may be earlier
    (1, "A", [F(3, 1, "B"), F(5, 1, "A")], SHORT, False, False),       # B claimed epoch 1 first
    (1, "A", [F(3, 1, "A"), F(5, 1, "B")], SHORT, False, True),        # A's claim first: B's is void
    (0, "", [], SHORT, False, True),                                   # nothing fenced read: no scheduler fences here
    (0, "", [F(12, 1, "A")], SHORT, False, None),                      # a fenced log: only more of it can tell
    (0, "", [F(12, 1, "A")], SHORT, True, True),                       # … its start: no fence before it
    (0, "", [F(4, 1, "A")], SHORT, False, False),                      # after a fence, unfenced decisions do not count
], ids=["fenced", "deposed", "deposed-by-decision", "fence-after", "margin", "no-fence", "rival-claim",
        "second-claim", "first-claim", "unfenced", "unfenced-in-fenced-log", "unfenced-at-start",
        "unfenced-after-fence"])
def test_counts_by_what_was_read(epoch, leader, seen, read_back, at_start, want):
    d = decision("web", "d", epoch=epoch, leader=leader)
    fenced_log = any(s.epoch > 0 for s in seen)
    assert counts(d, 10, seen, read_back=read_back, at_start=at_start, fenced_log=fenced_log,
                  margin=MARGIN) is want


def test_a_tail_reads_kafka_only(nats_server, namespace):
    from tidal_bus.errors import BusError

    async def attempt():
        async with make_bus(nats_server.url, namespace) as bus:
            PartitionTail(bus, "placement.decision", 0, cluster=CLUSTER)

    with pytest.raises(BusError, match="reads Kafka only"):
        asyncio.run(attempt())
