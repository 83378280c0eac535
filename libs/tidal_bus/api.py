"""The backend-neutral bus interface: raw bytes in, raw messages out.

Backends (NATS JetStream, Kafka) implement `Backend`; everything above it
(decoding, dedupe, retries, dead letters, replay) lives in `consumer.py` and
is shared, so both backends behave the same.
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from tidal_clock import now_utc
from tidal_schemas.streams import StreamSpec

from .trace_context import TraceContext


@dataclass(frozen=True)
class StartAt:
    """Where a new consumer group starts reading. An existing group always
    resumes from its own committed position."""

    kind: Literal["earliest", "latest", "time", "sequence", "after"]
    time: datetime | None = None
    sequence: int | None = None
    positions: tuple[tuple[int, int], ...] = ()

    @classmethod
    def earliest(cls) -> "StartAt":
        return cls("earliest")

    @classmethod
    def latest(cls) -> "StartAt":
        return cls("latest")

    @classmethod
    def at_time(cls, when: datetime) -> "StartAt":
        return cls("time", time=when)

    @classmethod
    def at_sequence(cls, sequence: int) -> "StartAt":
        """A stream sequence on NATS; an offset in every partition on Kafka."""
        return cls("sequence", sequence=sequence)

    @classmethod
    def after(cls, positions: dict[int, int]) -> "StartAt":
        """Right after the last position read in each partition (from a
        previous `read`), so a reader can drain a backlog, then follow."""
        return cls("after", positions=tuple(sorted(positions.items())))

    @classmethod
    def parse(cls, text: str) -> "StartAt":
        """`earliest`, `latest`, an ISO-8601 time or a sequence number."""
        if text in ("earliest", "latest"):
            return cls(text)  # type: ignore[arg-type]
        if text.isascii() and text.isdigit() and len(text) <= 18:  # "²".isdigit() is true too
            return cls.at_sequence(int(text))
        try:
            return cls.at_time(parse_time(text))
        except ValueError as exc:
            raise ValueError(f"--from: expected earliest, latest, a sequence number or {exc}") from None


_AGO = re.compile(r"^-([0-9]{1,9}(?:\.[0-9]{1,6})?)([smhd])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """An ISO-8601 time with a zone, or `-30s` / `-15m` / `-2h` / `-1d`
    before `now` (default: the current time). ValueError says what to give."""
    ago = _AGO.match(text)
    if ago:
        try:
            before = timedelta(seconds=float(ago.group(1)) * _SECONDS[ago.group(2)])
            return (now or now_utc()) - before
        except OverflowError:  # -999999999d reaches before year 1
            raise ValueError(f"a time after year 1, got {text!r}") from None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"an ISO time or -30m, got {text!r}") from None
    if when.tzinfo is None:
        raise ValueError(f"a time with a timezone, e.g. {text}Z, got {text!r}")
    return when


@dataclass
class RawMessage:
    """One delivered message, before decoding."""

    data: bytes
    key: str
    partition: int
    position: int
    deliveries: int
    ack: Callable[[], Awaitable[None]] = field(repr=False)
    nak: Callable[[float], Awaitable[None]] = field(repr=False)
    pending: int | None = None  # messages after this one not yet delivered (lag)
    stored_at: datetime | None = None  # when the broker stored it (NATS) or the producer sent it (Kafka)
    cluster: str | None = None  # the cluster it was published under (subject token / record key), when known
    trace: TraceContext | None = None  # from its trace headers; None when absent or malformed
    lane: str | None = None  # the stream's side lane it was sent in (StreamSpec.side_lane); None: the main lane


class GroupSubscription(abc.ABC):
    """A member of a consumer group: receives the messages of the partitions
    it currently owns; partitions move between members as they come and go."""

    stopping: bool = False

    def request_stop(self) -> None:
        """Make `messages()` end after the message being handled (graceful drain)."""
        self.stopping = True

    @abc.abstractmethod
    def messages(self) -> AsyncIterator[RawMessage]:
        """Messages of owned partitions, in order within a partition; ends
        after `request_stop()`."""

    @abc.abstractmethod
    def owned(self) -> frozenset[int]:
        """Partitions this member owns right now."""

    @abc.abstractmethod
    async def committed(self, partition: int) -> int:
        """Position up to which the group has handled `partition` (0 = none)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Leave the group; unacknowledged messages go to other members."""

    async def lag(self) -> dict[int, int]:
        """Per partition owned now, the messages the group has not handled
        yet: waiting on the broker plus handed out and not acknowledged.
        Asks the broker; empty when the backend cannot tell."""
        return {}


AssignmentListener = Callable[["GroupSubscription", frozenset[int], frozenset[int]], Awaitable[None]]
"""Called with (subscription, gained, lost) before messages of gained partitions flow."""


Position = Coroutine[Any, Any, int]
"""A message's stream position, once the broker has acked it (`Backend.send`)."""


async def known(position: int) -> int:
    """An awaitable of a position already known."""
    return position


class Backend(abc.ABC):
    """A message broker holding Tidal's streams."""

    @abc.abstractmethod
    async def connect(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def ensure_stream(self, spec: StreamSpec) -> None:
        """Create the stream/topic when missing (idempotent)."""

    @abc.abstractmethod
    async def publish(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str,
                      trace: TraceContext | None = None, lane: str | None = None) -> int:
        """Append one message, with `trace` in its headers, in the stream's
        side `lane` (None: the main lane); return its position. Waits for
        the broker's ack."""

    async def send(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str,
                   trace: TraceContext | None = None, lane: str | None = None) -> Position:
        """Hand one message to the broker behind every message handed before
        it, and return a coroutine of its position (the broker's ack):
        messages sent so keep their order however their acks are waited
        for. This default waits for the ack here."""
        position = await self.publish(spec, cluster, key, data, msg_id, trace, lane)
        return known(position)

    @abc.abstractmethod
    async def subscribe(
        self,
        spec: StreamSpec,
        group: str,
        start: StartAt,
        *,
        on_assign: AssignmentListener | None = None,
        linger_s: float = 0.0,
    ) -> GroupSubscription:
        """Join consumer group `group` on the stream. `linger_s` > 0: once a
        message is there, wait that long for more before handing them over,
        so that a trickle is read in batches (latency traded for CPU)."""

    @abc.abstractmethod
    def read(
        self,
        spec: StreamSpec,
        start: StartAt,
        *,
        partitions: frozenset[int] | None = None,
        until: dict[int, int] | None = None,
        follow: bool = False,
        linger_s: float = 0.0,
        main_lane_only: bool = False,
    ) -> AsyncIterator[RawMessage]:
        """Read without a group (tail, replay, state rebuild). With `until`,
        stop in each partition after that position; without `follow`, stop
        at the end of what exists now. Following, `linger_s` as in `subscribe`.
        `main_lane_only`: without the stream's side lane (the broker does
        not send it, where it can tell)."""

    @abc.abstractmethod
    async def delete_stream(self, spec: StreamSpec) -> None:
        """Remove a stream and its data (used by tests and isolated replays)."""

    @property
    @abc.abstractmethod
    def connected(self) -> bool: ...

    async def unavailable(self) -> str | None:
        """Why the broker cannot take writes now (no quorum, no leader), or
        None when it can; asked on a timer for /readyz. This default knows
        only the connection."""
        return None if self.connected else "bus disconnected"
