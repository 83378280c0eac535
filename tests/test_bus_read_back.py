"""A process reading back what it published (placement its decisions) gets
the envelope it published, not a decode of the bytes; any other event, and
a copy of its bytes under another subject, is decoded (and refused) as any
input. Over a real NATS server."""

from __future__ import annotations

from conftest import make_bus
from tidal_bus import RawMessage, StartAt, read_back
from tidal_bus.read_back import ReadBack
from tidal_schemas import PlacementDecision, PlacementDecisions, encode, make_envelope
from tidal_schemas.errors import IdentityError


def decisions(name: str) -> PlacementDecisions:
    return PlacementDecisions.of(PlacementDecision(decision_id=f"d-{name}", namespace="ns", name=name,
                                                   outcome="placed", node="node-a"))


async def test_its_own_events_come_back_as_published_and_others_decoded(nats_server, namespace):
    async with make_bus(nats_server.url, namespace, source="placement") as bus, \
            make_bus(nats_server.url, namespace, source="other") as other:
        bus.reads_back("placement.decision")
        mine = await bus.publish(decisions("p1"))
        theirs = await other.publish(decisions("p2"))
        read = [event async for _, event in bus.read("placement.decision", StartAt.earliest())]
        again = [event async for _, event in bus.read("placement.decision", StartAt.earliest())]
    assert read[0] is mine  # not decoded again
    assert read[1] is not theirs and read[1] == theirs
    assert again[0] is not mine and again[0] == mine  # taken once: a second read decodes


async def test_a_copy_of_its_bytes_under_another_subject_is_decoded_and_refused(nats_server, namespace):
    async with make_bus(nats_server.url, namespace, source="placement") as bus:
        bus.reads_back("placement.decision")
        published = await bus.publish(decisions("p1"))
        copy = await bus.publish_raw("placement.decision", "ns/someone-else", encode(published))
        read = [event async for _, event in bus.read("placement.decision", StartAt.at_sequence(copy))]
        assert len(read) == 1 and isinstance(read[0], IdentityError)
        assert bus.refused["placement.decision"] == 1
        own = [event async for _, event in bus.read("placement.decision", StartAt.earliest())][0]
    assert own == published  # decoded (the copy took what was kept), and whole


def raw(data: bytes, key: str = "ns/p0", cluster: str | None = "c1") -> RawMessage:
    async def nothing(*_) -> None: ...
    return RawMessage(data=data, key=key, partition=0, position=1, deliveries=1, ack=nothing, nak=nothing,
                      cluster=cluster)


def test_what_is_kept_stays_within_its_bound_the_oldest_forgotten_first(monkeypatch):
    monkeypatch.setattr(read_back, "KEPT_BYTES", 1000)
    kept = ReadBack({"placement.decision"})
    envelopes = [make_envelope(decisions(f"p{i}"), cluster="c1", source="placement") for i in range(10)]
    for i, envelope in enumerate(envelopes):
        kept.published(envelope, bytes([i]) * 300)
    assert [kept.taken(raw(bytes([i]) * 300, f"ns/p{i}"), "placement.decision") for i in range(10)] \
        == [None] * 7 + envelopes[7:]


def test_only_the_streams_named_and_only_under_their_own_key_and_cluster():
    kept = ReadBack({"placement.decision"})
    envelope = make_envelope(decisions("p0"), cluster="c1", source="placement")
    kept.published(envelope, b"a")
    assert kept.taken(raw(b"a"), "bind.result") is None  # not a stream read back
    assert kept.taken(raw(b"a", cluster="c2"), "placement.decision") is None  # another cluster's subject
    kept.published(envelope, b"a")
    assert kept.taken(raw(b"a", cluster=None), "placement.decision") is envelope  # cluster not known: as accept
    unnamed = ReadBack()
    unnamed.published(envelope, b"a")
    assert unnamed.taken(raw(b"a"), "placement.decision") is None
