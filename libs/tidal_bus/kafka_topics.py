"""Kafka topics for streams: created with the stream's partitions and
retention, and an auto-created one (the broker's default partition count)
repaired or refused."""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from tidal_schemas.streams import StreamSpec

from .errors import BusError

log = logging.getLogger(__name__)


def topic_configs(spec: StreamSpec) -> dict[str, str]:
    """Retention of a topic: by age (and size), or compacted for a state
    stream (the last record of every key is kept, whatever its age)."""
    if spec.keep_last_per_key:
        return {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1"}
    return {"retention.ms": str(int(spec.max_age_s * 1000)),
            "retention.bytes": str(spec.max_bytes if spec.max_bytes is not None else -1)}


def new_topic(topic: str, spec: StreamSpec) -> NewTopic:
    return NewTopic(topic, num_partitions=spec.partitions, replication_factor=1, topic_configs=topic_configs(spec))


async def create_topic(admin: AIOKafkaAdminClient, new: NewTopic) -> int:
    """The topic's error code: aiokafka answers per-topic errors in the response."""
    try:
        response = await admin.create_topics([new])
    except TopicAlreadyExistsError:
        return TopicAlreadyExistsError.errno
    codes = [error[1] for error in getattr(response, "topic_errors", ())]
    bad = [code for code in codes if code not in (0, TopicAlreadyExistsError.errno)]
    if bad:
        raise BusError(f"cannot create topic {new.name}: Kafka error code {bad[0]}")
    return codes[0] if codes else 0


async def ensure_topic(admin: AIOKafkaAdminClient, topic: str, spec: StreamSpec, bootstrap: str,
                       options: dict) -> None:
    """The stream's topic exists with the stream's partition count."""
    new = new_topic(topic, spec)
    if await create_topic(admin, new) == TopicAlreadyExistsError.errno:
        await repair_partitions(admin, topic, spec, new, bootstrap, options)


async def repair_partitions(admin: AIOKafkaAdminClient, topic: str, spec: StreamSpec, new: NewTopic,
                            bootstrap: str, options: dict) -> None:
    """A topic that exists with another partition count was made by the
    broker's auto-creation (any client's metadata request for a missing topic
    creates it with the broker's default, e.g. after a memory-storage broker
    restarts): keys would land on partitions that do not exist. An empty one
    is re-created right; one holding records is an operator's decision."""
    (described,) = await admin.describe_topics([topic])
    count = len(described.get("partitions", ()))
    if count == spec.partitions:
        return
    if await holds_records(topic, count, bootstrap, options):
        raise BusError(f"topic {topic} has {count} partitions, the stream {spec.name} needs {spec.partitions}, "
                       f"and it holds records: move them and delete the topic (disable the broker's "
                       f"auto.create.topics.enable so it cannot happen again)")
    log.warning("topic %s was auto-created with %d partitions; re-creating it with %d",
                topic, count, spec.partitions)
    try:
        await admin.delete_topics([topic])
    except UnknownTopicOrPartitionError:
        pass
    await create_topic(admin, new)  # already there: another process repaired it first


async def holds_records(topic: str, count: int, bootstrap: str, options: dict) -> bool:
    tps = [TopicPartition(topic, p) for p in range(count)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **options)
    await consumer.start()
    try:
        return any((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()
