"""A replica's journal: the steps it took, per cluster, in order, waiting to
be published on `stage.journal` (tidal_schemas.journal). A service that
keeps one (`Service.journal`) has it published every `journal_s` and on
stop, in events of about JOURNAL_EVENT_BYTES."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from tidal_schemas import encode
from tidal_schemas.journal import Step
from tidal_schemas.streams import STREAMS

JOURNAL_EVENT_BYTES = 256 << 10  # well inside a broker's message limit (NATS: 1 MiB by default)
MAX_UNPUBLISHED_STEPS = 1_000_000
"""Steps kept per cluster while the broker takes none (about 100 MB): past
it the oldest are dropped, and the next journal event skips a `seq`, so a
replay names the gap instead of replaying a journal with a hole in it."""


def digest(data: bytes) -> str:
    """What a journal notes of the bytes of an event it read (CRC-32, hex)."""
    return f"{zlib.crc32(data):08x}"


class Journal:
    def __init__(self) -> None:
        self.steps: dict[str, list[Step]] = {}  # cluster -> steps not yet published
        self.lost: dict[str, int] = {}  # cluster -> steps dropped since the last published event

    def step(self, cluster: str, op: str, now: float, a: str = "", b: str = "") -> None:
        self.steps.setdefault(cluster, []).append((op, now, a, b))

    def read(self, envelope: Any, now: float, read_digest: str = "", op: str = "read") -> None:
        """An input applied: its stream and id (and `digest` of its bytes when
        known), or, from a state stream that keeps only each key's last
        event, the event whole (op `held`)."""
        stream = envelope.type
        if STREAMS[stream].keep_last_per_key:
            self.step(envelope.cluster, "held", now, stream, encode(envelope).decode())
        else:
            self.step(envelope.cluster, op, now, stream, f"{envelope.id} {read_digest}".rstrip())

    def put_back(self, cluster: str, steps: list[Step]) -> None:
        """Steps drained but not published: ahead of any taken since, the
        oldest dropped past MAX_UNPUBLISHED_STEPS."""
        kept = [*steps, *self.steps.get(cluster, [])]
        if (over := len(kept) - MAX_UNPUBLISHED_STEPS) > 0:
            self.lost[cluster] = self.lost.get(cluster, 0) + over
            kept = kept[over:]
        self.steps[cluster] = kept

    def drain(self) -> dict[str, list[Step]]:
        """The steps taken since the last drain, per cluster."""
        taken, self.steps = self.steps, {}
        return taken


def recorded_input(inputs: Mapping[tuple[str, str], tuple[Any, str]], stream: str, noted: str) -> tuple[Any, str]:
    """The recorded event a `read` step names (`noted`: its id, then the
    CRC-32 of the bytes read when known), or None and why not: gone from
    the recording, or not the bytes the replica read."""
    event_id, _, crc = noted.partition(" ")
    found = inputs.get((stream, event_id))
    if found is None:
        return None, f"input {stream} {event_id} is not in the recording (aged out, or read from another recording)"
    envelope, have = found
    if crc and have != crc:
        return None, (f"input {stream} {event_id} ({envelope.key}) is not the event the replica read: its bytes "
                      f"changed (CRC-32 {have}, read {crc})")
    return envelope, ""


def journal_parts(steps: list[Step]) -> Iterator[list[Step]]:
    """`steps` cut into runs of about JOURNAL_EVENT_BYTES encoded."""
    part, size = [], 0
    for step in steps:
        part.append(step)
        size += 48 + len(step[2]) + len(step[3])
        if size >= JOURNAL_EVENT_BYTES:
            yield part
            part, size = [], 0
    if part:
        yield part
