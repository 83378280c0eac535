"""A topic the broker auto-created (any client's metadata request for a
missing topic makes one with the broker's default partition count, e.g. while
a memory-storage broker comes back from a restart) must not swallow events:
Tidal partitions by key over the stream's own count, so an empty auto-created
topic is re-created right, and one holding records is refused with a clear
error instead of every publish to a missing partition failing."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from builders import metrics
from conftest import make_bus
from tidal_bus import BusError, StartAt
from tidal_bus.subjects import kafka_topic
from tidal_schemas.streams import partition_for, stream


def bootstrap(url: str) -> str:
    return url.removeprefix("kafka://")


async def auto_create(url: str, topic: str) -> int:
    """What an outside client's metadata request does to a missing topic."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(url))
    await producer.start()
    try:
        return len(await producer.partitions_for(topic))
    finally:
        await producer.stop()


async def partition_count(url: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(url))
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
        return len(described["partitions"])
    finally:
        await admin.close()


def node_on_a_high_partition(partitions: int, auto_count: int) -> str:
    return next(f"n{i}" for i in range(1000) if partition_for(f"n{i}", partitions) >= auto_count)


async def test_an_empty_auto_created_topic_is_re_created_with_the_streams_partitions(kafka_server, namespace):
    spec = stream("node.metrics")
    topic = kafka_topic(namespace, spec)
    auto_count = await auto_create(kafka_server.url, topic)
    assert auto_count < spec.partitions, "the broker's default must differ for this test to mean anything"
    node = node_on_a_high_partition(spec.partitions, auto_count)

    async with make_bus(kafka_server.url, namespace) as bus:
        await bus.publish(metrics(node, load=0.5))
        read = [e.payload.node async for _, e in bus.read("node.metrics", StartAt.earliest())]
    assert read == [node]
    assert await partition_count(kafka_server.url, topic) == spec.partitions


async def test_an_auto_created_topic_holding_records_is_refused_with_the_reason(kafka_server, namespace):
    spec = stream("node.metrics")
    topic = kafka_topic(namespace, spec)
    auto_count = await auto_create(kafka_server.url, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(kafka_server.url))
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"someone else's record", partition=0)
    finally:
        await producer.stop()

    async with make_bus(kafka_server.url, namespace) as bus:
        with pytest.raises(BusError, match=rf"{auto_count} partitions.*needs {spec.partitions}.*holds records"):
            await bus.publish(metrics(node_on_a_high_partition(spec.partitions, auto_count), load=0.5))
    assert await partition_count(kafka_server.url, topic) == auto_count, "records are never deleted"
