"""Replication of Tidal's Kafka topics: replication factor and
min.insync.replicas from the brokers the cluster reports (3 / 2 on three or
more, 1 / 1 below), settable; an existing topic keeping fewer copies is
reported, never changed; producers send with acks=all; a read-only backend
creates no topic; a multi-seed URL connects with a seed down.

No multi-broker Kafka-protocol broker installs from PyPI here (see
docs/production-bus.md, "Kafka"): the single Tansu broker answers every
request for real. Where a test needs a cluster of three, only the metadata
answer (describe_cluster's broker list) is replaced, because Tansu reports
itself alone whatever its storage; Tansu takes a CreateTopics of factor 3
on one broker, so what the request carried is read back from the broker."""

from __future__ import annotations

import logging

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from builders import metrics
from conftest import KAFKA_TEST_OPTIONS, make_bus
from tidal_bus import BusError, StartAt, backend_from_url
from tidal_bus.backends import BUS_BACKENDS
from tidal_bus.embedded import free_port
from tidal_bus.errors import BusConfigError
from tidal_bus.kafka_backend import KafkaBackend
from tidal_bus.kafka_replication import Replication, factor_shortfall, min_insync_shortfall, replication_for
from tidal_bus.kafka_topics import topic_min_insync
from tidal_bus.subjects import kafka_topic
from tidal_schemas.streams import stream


# --- the policy (pure) -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("brokers, factor, min_insync, expected", [
    (1, None, None, Replication(1, 1)),              # one broker: nothing to replicate to
    (2, None, None, Replication(1, 1)),              # two: below a cluster of three (warned at connect)
    (3, None, None, Replication(3, 2)),              # three: survives one broker lost, acks=all waits for 2
    (5, None, None, Replication(3, 2)),              # more brokers do not mean more copies
    (1, 3, None, Replication(3, 2, explicit=True)),  # the operator's factor stands (Kafka refuses it on 1)
    (3, 2, None, Replication(2, 1, explicit=True)),  # factor 2: min 1, or one broker down stops writes
    (3, 3, 3, Replication(3, 3, explicit=True)),     # every replica before the ack: no broker may be down
    (3, None, 1, Replication(3, 1)),
])
def test_replication_for(brokers, factor, min_insync, expected):
    assert replication_for(brokers, factor, min_insync) == expected


@pytest.mark.parametrize("factor, min_insync, match", [
    (0, None, "replication factor must be at least 1"),
    (None, 0, "min.insync.replicas must be at least 1"),
    (2, 3, "min.insync.replicas 3 is above the replication factor 2"),
    (None, 2, "min.insync.replicas 2 is above the replication factor 1"),  # on one broker
])
def test_a_replication_no_write_could_satisfy_is_refused(factor, min_insync, match):
    with pytest.raises(BusConfigError, match=match):
        replication_for(1, factor, min_insync)


def test_shortfalls_say_what_the_topic_has_and_how_to_raise_it():
    wanted = Replication(3, 2)
    assert factor_shortfall("t", wanted, 3) is None
    assert factor_shortfall("t", wanted, 4) is None  # more than configured is the operator's, kept
    assert "replication factor 1, below the 3" in factor_shortfall("t", wanted, 1)
    assert "kafka-reassign-partitions" in factor_shortfall("t", wanted, 1)
    assert min_insync_shortfall("t", wanted, 2) is None
    assert min_insync_shortfall("t", wanted, None) is None  # the broker did not say
    assert "min.insync.replicas=2" in min_insync_shortfall("t", wanted, 1)


def test_the_backend_takes_replication_and_read_only_as_options():
    assert {"replication_factor", "min_insync_replicas", "read_only"} <= BUS_BACKENDS["kafka"].options()
    with pytest.raises(BusConfigError, match="at least 1"):
        KafkaBackend("127.0.0.1:9092", "ns", replication_factor=0)


# --- against the broker ----------------------------------------------------------------------------------------

def three_brokers(monkeypatch, port: int) -> None:
    """The metadata answer of a three-broker cluster (the only thing faked:
    Tansu reports one broker); every other request goes to the real broker."""
    real = AIOKafkaAdminClient.describe_cluster

    async def describe_cluster(self):
        answer = await real(self)
        answer["brokers"] = [{"node_id": n, "host": "127.0.0.1", "port": port, "rack": None} for n in (1, 2, 3)]
        return answer

    monkeypatch.setattr(AIOKafkaAdminClient, "describe_cluster", describe_cluster)


async def connected(url: str, namespace: str, **options) -> KafkaBackend:
    backend = backend_from_url(url, namespace, **{**KAFKA_TEST_OPTIONS, **options})
    await backend.connect()
    return backend


async def topic_figures(backend: KafkaBackend, topic: str) -> tuple[int, int | None]:
    """(the fewest replicas of any partition, min.insync.replicas) as the broker reports them."""
    (described,) = await backend._admin.describe_topics([topic])
    replicas = min(len(p["replicas"]) for p in described["partitions"])
    return replicas, await topic_min_insync(backend._admin, topic)


async def create_by_hand(backend: KafkaBackend, topic: str, partitions: int, factor: int, min_insync: int) -> None:
    """What an operator's kafka-topics.sh --create does."""
    await backend._admin.create_topics([NewTopic(topic, partitions, factor,
                                                 topic_configs={"min.insync.replicas": str(min_insync)})])


async def test_on_one_broker_topics_get_one_replica_and_producers_acks_all(kafka_server, namespace):
    spec = stream("node.metrics")
    backend = await connected(kafka_server.url, namespace)
    try:
        assert backend.replication == Replication(1, 1)
        assert backend._producer._sender._acks == -1, "acks=all: the leader waits for min.insync.replicas"
        await backend.ensure_stream(spec)
        assert await topic_figures(backend, kafka_topic(namespace, spec)) == (1, 1)
    finally:
        await backend.close()


async def test_on_three_brokers_create_topics_carries_factor_3_and_min_insync_2(kafka_server, namespace,
                                                                                  monkeypatch, caplog):
    three_brokers(monkeypatch, kafka_server.port)
    sent: list[NewTopic] = []
    real_create = AIOKafkaAdminClient.create_topics

    async def create_topics(self, new_topics, *args, **kwargs):
        sent.extend(new_topics)
        return await real_create(self, new_topics, *args, **kwargs)

    monkeypatch.setattr(AIOKafkaAdminClient, "create_topics", create_topics)
    spec = stream("node.metrics")
    caplog.set_level(logging.INFO, logger="tidal_bus.kafka_backend")
    backend = await connected(kafka_server.url, namespace)
    try:
        assert backend.replication == Replication(3, 2)
        await backend.ensure_stream(spec)
        topic = kafka_topic(namespace, spec)
        (request,) = [new for new in sent if new.name == topic]
        assert (request.replication_factor, request.topic_configs["min.insync.replicas"]) == (3, "2")
        assert await topic_figures(backend, topic) == (3, 2), "as the broker stored it"
    finally:
        await backend.close()
    assert "brokers 1@127.0.0.1" in caplog.text and "replication factor 3, min.insync.replicas 2" in caplog.text


async def test_a_topic_below_an_operator_set_factor_is_refused_and_left_as_it_is(kafka_server, namespace):
    spec = stream("node.metrics")
    topic = kafka_topic(namespace, spec)
    backend = await connected(kafka_server.url, namespace, replication_factor=2)
    try:
        await create_by_hand(backend, topic, spec.partitions, factor=1, min_insync=1)
        with pytest.raises(BusError, match=rf"topic {topic} has replication factor 1, below the 2 configured"):
            await backend.ensure_stream(spec)
        assert await topic_figures(backend, topic) == (1, 1), "never changed"
    finally:
        await backend.close()


async def test_a_topic_below_the_default_is_warned_about_and_used_as_it_is(kafka_server, namespace, monkeypatch,
                                                                           caplog):
    three_brokers(monkeypatch, kafka_server.port)
    spec = stream("node.metrics")
    topic = kafka_topic(namespace, spec)
    async with make_bus(kafka_server.url, namespace) as bus:
        await create_by_hand(bus.backend, topic, spec.partitions, factor=1, min_insync=1)
        with caplog.at_level(logging.WARNING, logger="tidal_bus.kafka_topics"):
            await bus.publish(metrics("n1", load=0.5))
        read = [e.payload.node async for _, e in bus.read("node.metrics", StartAt.earliest())]
        assert read == ["n1"]
        assert await topic_figures(bus.backend, topic) == (1, 1), "never changed"
    assert f"topic {topic} has replication factor 1, below the 3" in caplog.text
    assert f"topic {topic} has min.insync.replicas 1, below the 2" in caplog.text


async def test_a_topic_above_the_configuration_is_kept(kafka_server, namespace, caplog):
    spec = stream("node.metrics")
    topic = kafka_topic(namespace, spec)
    backend = await connected(kafka_server.url, namespace)  # one broker: 1 / 1 wanted
    try:
        await create_by_hand(backend, topic, spec.partitions, factor=3, min_insync=2)
        with caplog.at_level(logging.WARNING, logger="tidal_bus.kafka_topics"):
            await backend.ensure_stream(spec)
        assert await topic_figures(backend, topic) == (3, 2), "an operator's higher figures are never lowered"
    finally:
        await backend.close()
    assert topic not in caplog.text


async def test_a_read_only_backend_creates_no_topic(kafka_server, namespace):
    spec = stream("dead.letter")
    topic = kafka_topic(namespace, spec)
    backend = await connected(kafka_server.url, namespace, read_only=True)
    try:
        with pytest.raises(BusError, match=rf"topic {topic} does not exist: no Tidal service has run"):
            [raw async for raw in backend.read(spec, StartAt.earliest())]
        with pytest.raises(BusError, match="deletes nothing"):
            await backend.delete_stream(spec)
        assert topic not in await backend._admin.list_topics(), "not created, not even by auto-creation"
    finally:
        await backend.close()


async def test_a_read_only_backend_reads_an_existing_topic_and_changes_nothing(kafka_server, namespace,
                                                                               monkeypatch):
    spec = stream("node.metrics")
    topic = kafka_topic(namespace, spec)
    async with make_bus(kafka_server.url, namespace) as bus:
        await create_by_hand(bus.backend, topic, spec.partitions, factor=1, min_insync=1)
        await bus.publish(metrics("n1", load=0.5))
    three_brokers(monkeypatch, kafka_server.port)  # the reader would want 3 / 2: it must not act on it
    calls: list[str] = []
    for name in ("create_topics", "delete_topics", "alter_configs"):
        monkeypatch.setattr(AIOKafkaAdminClient, name, lambda self, *a, _n=name, **k: calls.append(_n))
    backend = await connected(kafka_server.url, namespace, read_only=True)
    try:
        read = [raw async for raw in backend.read(spec, StartAt.earliest())]
        assert len(read) == 1
        assert calls == []
        assert await topic_figures(backend, topic) == (1, 1)
    finally:
        await backend.close()


async def test_a_multi_seed_url_connects_with_a_seed_down(kafka_server, namespace, caplog):
    down = free_port()  # nothing listens there
    url = f"kafka://127.0.0.1:{down},127.0.0.1:{kafka_server.port},127.0.0.1:{free_port()}"
    caplog.set_level(logging.INFO, logger="tidal_bus.kafka_backend")
    for _ in range(3):  # aiokafka tries the seeds in a random order: the dead one comes first in some rounds
        async with make_bus(url, namespace) as bus:
            assert bus.backend.bootstrap == [f"127.0.0.1:{down}", f"127.0.0.1:{kafka_server.port}",
                                             url.rsplit(",", 1)[1]]
            await bus.publish(metrics("n1", load=0.5))
    async with make_bus(url, namespace) as bus:
        assert [e.payload.node async for _, e in bus.read("node.metrics", StartAt.earliest())] == ["n1"] * 3
    assert f"through seeds 127.0.0.1:{down},127.0.0.1:{kafka_server.port}" in caplog.text
    assert f"@127.0.0.1:{kafka_server.port}" in caplog.text, "the broker that answered is named"
