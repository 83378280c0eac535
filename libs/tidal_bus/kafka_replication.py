"""How many copies a Kafka topic of Tidal's keeps, and what to say of an
existing topic that keeps fewer. Pure: the broker count comes from the
cluster's metadata, the topic's figures from describe_topics/describe_configs
(kafka_topics.py does the I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BusConfigError

CLUSTER_BROKERS = 3  # a cluster of at least this many brokers gets the replicated defaults


@dataclass(frozen=True)
class Replication:
    """A topic's replication factor and `min.insync.replicas`; `explicit`:
    the operator set the factor (a topic below it is refused, not only
    warned about)."""

    factor: int
    min_insync: int
    explicit: bool = False


def replication_for(brokers: int, factor: int | None = None, min_insync: int | None = None) -> Replication:
    """The replication of new topics on a cluster reporting `brokers` brokers.

    factor     = the configured one, else 3 if brokers >= 3, else 1
    min_insync = the configured one, else 2 if factor >= 3, else 1

    With acks=all, a write is acknowledged once `min_insync` replicas have
    it, so a topic of 3 / 2 takes writes with one broker down and loses no
    acknowledged write when one is lost. Refused (BusConfigError): a factor
    or minimum below 1, or a minimum above the factor (no write could ever
    be acknowledged)."""
    if factor is not None and factor < 1:
        raise BusConfigError(f"Kafka replication factor must be at least 1, not {factor}")
    if min_insync is not None and min_insync < 1:
        raise BusConfigError(f"Kafka min.insync.replicas must be at least 1, not {min_insync}")
    chosen = factor if factor is not None else (3 if brokers >= CLUSTER_BROKERS else 1)
    minimum = min_insync if min_insync is not None else (2 if chosen >= 3 else 1)
    if minimum > chosen:
        raise BusConfigError(f"Kafka min.insync.replicas {minimum} is above the replication factor {chosen}: "
                             f"no write could be acknowledged")
    return Replication(chosen, minimum, explicit=factor is not None)


def factor_shortfall(topic: str, wanted: Replication, replicas: int) -> str | None:
    """What to say of an existing topic whose partitions keep `replicas`
    copies (the fewest of any partition), or None when it keeps enough.
    Tidal never changes a topic's replicas: raising them is a partition
    reassignment, the operator's to run."""
    if replicas >= wanted.factor:
        return None
    return (f"topic {topic} has replication factor {replicas}, below the {wanted.factor} configured for "
            f"Tidal's topics; Tidal does not change an existing topic's replicas: raise them with a partition "
            f"reassignment (kafka-reassign-partitions.sh), or set the factor (TIDAL_BUS_REPLICAS) to {replicas} "
            f"to accept it")


def min_insync_shortfall(topic: str, wanted: Replication, min_insync: int | None) -> str | None:
    """What to say of an existing topic whose `min.insync.replicas` is below
    the configured one (None: the topic does not report it), else None.
    Left as the operator set it: acks=all then acknowledges writes held by
    fewer brokers than configured."""
    if min_insync is None or min_insync >= wanted.min_insync:
        return None
    return (f"topic {topic} has min.insync.replicas {min_insync}, below the {wanted.min_insync} configured; "
            f"Tidal leaves a topic's configs as the operator set them: raise it with kafka-configs.sh "
            f"--alter --entity-type topics --entity-name {topic} --add-config "
            f"min.insync.replicas={wanted.min_insync}")
