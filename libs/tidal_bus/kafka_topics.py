"""Kafka topics for streams: created with the stream's partitions,
retention and replication; an auto-created one (the broker's default
partition count) repaired or refused; an existing one keeping fewer copies
than configured reported, never changed. A read-only backend only checks."""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import (InvalidReplicationFactorError, KafkaError, TopicAlreadyExistsError,
                             UnknownTopicOrPartitionError, for_code)

from tidal_schemas.streams import StreamSpec

from .errors import BusError
from .kafka_replication import Replication, factor_shortfall, min_insync_shortfall

log = logging.getLogger(__name__)


def topic_configs(spec: StreamSpec, replication: Replication) -> dict[str, str]:
    """Retention of a topic: by age (and size), or compacted for a state
    stream (the last record of every key is kept, whatever its age); and
    how many replicas must hold a write before acks=all acknowledges it."""
    durable = {"min.insync.replicas": str(replication.min_insync)}
    if spec.keep_last_per_key:
        return {"cleanup.policy": "compact", "retention.ms": "-1", "retention.bytes": "-1", **durable}
    return {"retention.ms": str(int(spec.max_age_s * 1000)),
            "retention.bytes": str(spec.max_bytes if spec.max_bytes is not None else -1), **durable}


def new_topic(topic: str, spec: StreamSpec, replication: Replication) -> NewTopic:
    """The CreateTopics entry of a stream's topic."""
    return NewTopic(topic, num_partitions=spec.partitions, replication_factor=replication.factor,
                    topic_configs=topic_configs(spec, replication))


async def create_topic(admin: AIOKafkaAdminClient, new: NewTopic) -> int:
    """The topic's error code: aiokafka answers per-topic errors in the response."""
    try:
        response = await admin.create_topics([new])
    except TopicAlreadyExistsError:
        return TopicAlreadyExistsError.errno
    errors = list(getattr(response, "topic_errors", ()))  # (topic, code[, message])
    codes = [error[1] for error in errors]
    bad = [error for error in errors if error[1] not in (0, TopicAlreadyExistsError.errno)]
    if bad:
        code, said = bad[0][1], (bad[0][2] if len(bad[0]) > 2 else None)
        hint = (f" (replication factor {new.replication_factor}: more than the cluster's live brokers? "
                f"set TIDAL_BUS_REPLICAS)" if code == InvalidReplicationFactorError.errno else "")
        raise BusError(f"cannot create topic {new.name}: Kafka error {code} {for_code(code).__name__}"
                       f"{': ' + said if said else ''}{hint}")
    return codes[0] if codes else 0


async def ensure_topic(admin: AIOKafkaAdminClient, topic: str, spec: StreamSpec, bootstrap: list[str],
                       options: dict, replication: Replication, *, read_only: bool = False) -> None:
    """The stream's topic exists with the stream's partition count, created
    with `replication` if missing; an existing one keeping fewer copies is
    reported (refused when the operator set the factor). `read_only` (a
    command that only reads): the topic is checked, never created or changed."""
    if read_only:
        await check_topic(admin, topic, spec)
        return
    new = new_topic(topic, spec, replication)
    if await create_topic(admin, new) == TopicAlreadyExistsError.errno:
        await repair_partitions(admin, topic, spec, new, bootstrap, options)
        await check_replication(admin, topic, replication)


async def check_topic(admin: AIOKafkaAdminClient, topic: str, spec: StreamSpec) -> None:
    """A read-only command's check: the topic is there (asked of the whole
    cluster's topic list, which never auto-creates one) with the stream's
    partitions."""
    if topic not in await admin.list_topics():
        raise BusError(f"topic {topic} does not exist: no Tidal service has run in this namespace on this bus")
    count = await partition_count(admin, topic)
    if count != spec.partitions:
        raise BusError(f"topic {topic} has {count} partitions, the stream {spec.name} needs {spec.partitions}: "
                       f"a read-only command changes nothing; start a Tidal service to repair it")


async def check_replication(admin: AIOKafkaAdminClient, topic: str, wanted: Replication) -> None:
    """An existing topic against the configured replication: fewer replicas
    than an operator-set factor is refused, than the default only warned
    about; a lower min.insync.replicas is warned about. Nothing is changed."""
    (described,) = await admin.describe_topics([topic])
    replicas = min((len(p.get("replicas", ())) for p in described.get("partitions", ())), default=0)
    if (short := factor_shortfall(topic, wanted, replicas)) is not None:
        if wanted.explicit:
            raise BusError(short)
        log.warning("%s", short)
    if (short := min_insync_shortfall(topic, wanted, await topic_min_insync(admin, topic))) is not None:
        log.warning("%s", short)


async def topic_min_insync(admin: AIOKafkaAdminClient, topic: str) -> int | None:
    """The topic's effective min.insync.replicas, or None when the broker
    does not say (every config is asked for: Tansu drops the connection on
    a filtered DescribeConfigs)."""
    try:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    except KafkaError as exc:
        log.warning("topic %s: cannot read its configs (%s); min.insync.replicas not checked", topic, exc)
        return None
    for response in responses:
        for resource in response.resources:
            for entry in resource[4]:  # (name, value, read_only, source, sensitive, synonyms)
                if entry[0] == "min.insync.replicas" and entry[1] is not None:
                    return int(entry[1])
    return None


async def partition_count(admin: AIOKafkaAdminClient, topic: str) -> int:
    (described,) = await admin.describe_topics([topic])
    return len(described.get("partitions", ()))


async def repair_partitions(admin: AIOKafkaAdminClient, topic: str, spec: StreamSpec, new: NewTopic,
                            bootstrap: list[str], options: dict) -> None:
    """A topic that exists with another partition count was made by the
    broker's auto-creation (any client's metadata request for a missing topic
    creates it with the broker's default, e.g. after a memory-storage broker
    restarts): keys would land on partitions that do not exist. An empty one
    is re-created right; one holding records is an operator's decision."""
    count = await partition_count(admin, topic)
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


async def holds_records(topic: str, count: int, bootstrap: list[str], options: dict) -> bool:
    tps = [TopicPartition(topic, p) for p in range(count)]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **options)
    await consumer.start()
    try:
        return any((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()
