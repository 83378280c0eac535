"""Oversized messages are refused with a reason, on NATS and on Kafka.

- Publishing an event over MAX_EVENT_BYTES fails at once with EventTooLarge
  (not retriable) naming the size and the limit; nothing reaches the stream
  and the connection stays up.
- Below our limit, the broker's own limit is checked before sending: a NATS
  server closes the connection of a client that sends more than its
  max_payload (headers count), so the backend refuses such a message itself.
- A message over the limit that arrives anyway (a raw Kafka producer with a
  bigger max_request_size, a NATS server configured for bigger payloads) is
  never decoded: it goes to `dead.letter` as "oversized: N bytes > limit",
  and the consumer carries on.
"""

from __future__ import annotations

import asyncio
import base64

import pytest
from aiokafka import AIOKafkaProducer

from builders import T0, metrics
from conftest import make_bus, patience, wait_until
from tidal_bus import MAX_EVENT_BYTES, EventTooLarge, StartAt
from tidal_bus.embedded import EmbeddedNats
from tidal_bus.subjects import kafka_topic
from tidal_schemas import NodeAction, NodeMetrics, PodUsage, SchemaError, encode, make_envelope
from tidal_schemas.streams import stream


@pytest.fixture(scope="module")
def roomy_nats(tmp_path_factory):
    """A NATS server that lets 4 MiB payloads through: what lets an
    oversized event reach a consumer on NATS."""
    data_dir = tmp_path_factory.mktemp("roomy-nats")
    config = data_dir / "roomy.conf"
    config.write_text("max_payload: 4MB\n")
    server = EmbeddedNats(data_dir, config_file=config).start()
    yield server
    server.stop()


@pytest.fixture(params=["nats", "kafka"])
def bus_url(request) -> str:
    return request.getfixturevalue(f"{request.param}_server").url


def big_action(reason_bytes: int) -> NodeAction:
    return NodeAction(action_id="a1", node="n1", kind="taint", taint_key="k", reason="x" * reason_bytes)


def big_metrics(node: str, at_least: int) -> NodeMetrics:
    """A valid node.metrics event whose encoding is over `at_least` bytes."""
    pod = PodUsage(pod="ns/" + "p" * 200, cpu_milli=1, memory_mib=1)
    return NodeMetrics(node=node, sampled_at=T0, interval_s=10, pods=[pod] * (at_least // 250 + 1))


async def test_publishing_an_event_over_the_limit_is_refused_at_once(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus:
        await bus.ensure_streams(["node.action"])
        with pytest.raises(EventTooLarge) as caught:
            await bus.publish(big_action(MAX_EVENT_BYTES))
        message = str(caught.value)
        assert not caught.value.retriable
        assert f"over the {MAX_EVENT_BYTES}-byte limit" in message and "node.action event" in message
        size = int(message.split(": ")[1].split(" bytes")[0])
        assert size > MAX_EVENT_BYTES
        with pytest.raises(EventTooLarge, match=f"{MAX_EVENT_BYTES + 1} bytes is over"):
            await bus.publish_raw("node.action", "n1", b"x" * (MAX_EVENT_BYTES + 1))
        await bus.publish(big_action(10))  # the connection is still good
        stored = [e async for _, e in bus.read("node.action", StartAt.earliest())]
    assert [len(e.payload.reason) for e in stored] == [10]


async def test_nats_refuses_what_its_server_would_close_the_connection_for(nats_server, namespace):
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.ensure_streams(["node.metrics", "score.node"])
        # Within our limit, but with its Nats-Msg-Id header over the server's max_payload
        # (node.metrics, written by node agents, carries no such header: StreamSpec.written_by_nodes).
        data = b"x" * (MAX_EVENT_BYTES - 10)
        with pytest.raises(EventTooLarge, match=f"over the {MAX_EVENT_BYTES}-byte limit") as caught:
            await bus.backend.publish(stream("score.node"), "c1", "n1", data, "some-event-id")
        assert not caught.value.retriable and bus.backend.connected
        await bus.publish(metrics("n1"))
        assert [e.payload.node async for _, e in bus.read("node.metrics", StartAt.earliest())] == ["n1"]


async def test_kafkas_own_size_limit_is_a_clear_error(kafka_server, namespace):
    async with make_bus(kafka_server.url, namespace) as bus:
        await bus.ensure_streams(["node.metrics"])
        with pytest.raises(EventTooLarge, match="refused by Kafka") as caught:
            await bus.backend.publish(stream("node.metrics"), "c1", "n1", b"x" * (2 * MAX_EVENT_BYTES), "id")
        assert not caught.value.retriable


async def _publish_from_the_wire(broker: str, server, bus, data: bytes) -> None:
    """Put `data` on node.metrics the way a producer without our limit would."""
    if broker == "nats":  # the backend alone checks only the server's (4 MiB) limit
        await bus.backend.publish(stream("node.metrics"), "c1", "n-big", data, "")
        return
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{server.port}", max_request_size=8 << 20, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(kafka_topic(bus.backend.namespace, stream("node.metrics")), data, key=b"n-big",
                                     partition=0)
    finally:
        await producer.stop()


@pytest.mark.parametrize("broker", ["nats", "kafka"])
async def test_an_oversized_message_from_the_wire_is_dead_lettered_not_decoded(broker, request, namespace):
    server = request.getfixturevalue("roomy_nats" if broker == "nats" else "kafka_server")
    handled: list[str] = []

    async def handler(envelope, delivery):
        handled.append(envelope.payload.node)

    data = encode(make_envelope(big_metrics("n-big", MAX_EVENT_BYTES), cluster="c1", source="elsewhere"))
    assert len(data) > MAX_EVENT_BYTES  # a valid event: only its size is wrong
    async with make_bus(server.url, namespace) as bus:
        await bus.ensure_streams(["node.metrics", "dead.letter"])
        await _publish_from_the_wire(broker, server, bus, data)
        await bus.publish(metrics("n-small"))
        consumer = bus.consumer("node.metrics", "g", handler)
        task = asyncio.create_task(consumer.run())
        await wait_until(lambda: handled == ["n-small"], timeout=30, what="the event after the big one")
        letters = [e.payload async for _, e in bus.read("dead.letter", StartAt.earliest())]
        refused = [e async for _, e in bus.read("node.metrics", StartAt.earliest()) if isinstance(e, SchemaError)]
        consumer.stop()
        await asyncio.wait_for(task, patience(30))
    assert handled == ["n-small"]  # the big one never reached the handler
    (letter,) = letters
    assert letter.reason == f"oversized: {len(data)} bytes > {MAX_EVENT_BYTES}-byte limit"
    assert (letter.stream, letter.consumer, letter.original_size, letter.retriable) == \
        ("node.metrics", "g", len(data), False)
    assert base64.b64decode(letter.original_b64) == data[:len(base64.b64decode(letter.original_b64))]
    assert [str(e) for e in refused] == [letter.reason]  # readers without a group see the same reason
