"""Reads that use the broker's own index instead of a whole stream: one
key's messages, one cluster's messages between two positions, where a
stream's positions begin and end, and the first position stored at or
after a time.

On NATS every message's subject names its cluster and key
(`subjects.nats_subject`), and JetStream filters a consumer by subject on
the server, so a key's messages cost what they are, whatever else the
stream holds. Kafka has no such index (a key's partition holds every other
key of it too): there `indexed(bus)` is False and callers read the stream.

    async for raw, event in read_key(bus, "pod.lifecycle", "ns/pod", cluster="prod"): ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from tidal_schemas import Envelope, SchemaError
from tidal_schemas.streams import StreamSpec, partition_for, stream

from .api import RawMessage, StartAt
from .bus import Bus
from .errors import BusError
from .intake import accept
from .subjects import encode_token, nats_stream_name, nats_subject

Read = tuple[RawMessage, Envelope[Any] | SchemaError]


def indexed(bus: Bus) -> bool:
    """Whether `bus` filters a stream by key and cluster on the broker (NATS)."""
    from .nats_backend import NatsBackend

    return isinstance(bus.backend, NatsBackend)


def _backend(bus: Bus):
    if not indexed(bus):
        raise BusError(f"{type(bus.backend).__name__}: the broker cannot filter a stream by key")
    return bus.backend


def key_subjects(namespace: str, spec: StreamSpec, cluster: str, key: str) -> list[str]:
    """The subjects of `key`'s messages in `cluster`: its partition's, and
    that of the stream's side lane when it has one."""
    subject = nats_subject(namespace, spec, cluster, partition_for(key, spec.partitions), key)
    return [subject] + ([f"{subject}.{spec.side_lane}"] if spec.side_lane is not None else [])


def cluster_subjects(namespace: str, spec: StreamSpec, cluster: str) -> list[str]:
    """Every subject of `cluster` in the stream."""
    return [f"{namespace}.{spec.token}.{encode_token(cluster)}.>"]


async def _read(bus: Bus, spec: StreamSpec, subjects: list[str], start: StartAt,
                until: int | None = None) -> AsyncIterator[Read]:
    from .nats_reader import read_stream

    backend = _backend(bus)
    bound = None if until is None else {p: until for p in range(spec.partitions)}
    async for raw in read_stream(backend, spec, start, until=bound, subjects=subjects):
        try:
            yield raw, accept(raw.data, spec.name, key=raw.key, cluster=raw.cluster, lane=raw.lane)
        except SchemaError as exc:  # oversized, undecodable, wrong stream, forged: the reason, as Bus.read says it
            yield raw, exc


def read_key(bus: Bus, stream_name: str, key: str, *, cluster: str,
             start: StartAt | None = None) -> AsyncIterator[Read]:
    """`key`'s messages of `cluster` in the stream, in order, from `start`
    (default: the earliest), each with its decoded event or the SchemaError
    saying why it is refused; the broker sends no other message."""
    spec = stream(stream_name)
    subjects = key_subjects(_backend(bus).namespace, spec, cluster, key)
    return _read(bus, spec, subjects, start or StartAt.earliest())


def read_span(bus: Bus, stream_name: str, *, cluster: str, first: int, last: int) -> AsyncIterator[Read]:
    """`cluster`'s messages at stream positions first..last, in order."""
    spec = stream(stream_name)
    subjects = cluster_subjects(_backend(bus).namespace, spec, cluster)
    return _read(bus, spec, subjects, StartAt.at_sequence(max(first, 1)), until=last)


async def bounds(bus: Bus, stream_name: str) -> tuple[int, int]:
    """(first, last) position the stream holds now; last < first when empty."""
    backend = _backend(bus)
    spec = stream(stream_name)
    await backend.ensure_stream(spec)
    state = (await backend.js.stream_info(nats_stream_name(backend.namespace, spec))).state
    return state.first_seq, state.last_seq


async def position_at(bus: Bus, stream_name: str, when: datetime, *, cluster: str) -> int | None:
    """The position of `cluster`'s first message stored at or after `when`
    (JetStream finds it by time), None when there is none."""
    spec = stream(stream_name)
    subjects = cluster_subjects(_backend(bus).namespace, spec, cluster)
    async for raw, _ in _read(bus, spec, subjects, StartAt.at_time(when)):
        return raw.position
    return None
