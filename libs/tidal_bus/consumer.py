"""The consumer loop every service uses, identical over both backends.

For each message: accept it (oversized, undecodable, of another stream's
type or not speaking for the key and cluster it was published under -> dead
letter, see intake.py), skip other clusters, skip events already handled
(by id under their publisher's key, `intake.dedupe_key`), call the handler,
then ack. A failing
handler is retried with exponential back-off (in place when `ordered`, so a
key's events keep their order; by nak-with-delay otherwise) until
`max_attempts`, then the message is dead-lettered and the loop goes on.
Each invocation continues the trace the message came in (tracing.py), in
a span of its own when spans are on.

When the group hands this member a partition it already has history in,
the partition is first replayed up to the group's committed position with
`replaying=True`, so the handler rebuilds its state without repeating
effects (see `Delivery.replaying`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from hashlib import blake2b
from typing import TYPE_CHECKING, Any, Protocol

from tidal_schemas import Envelope, SchemaError
from tidal_schemas.streams import StreamSpec

from .api import GroupSubscription, RawMessage, StartAt
from .errors import is_retriable
from .intake import accept, dedupe_key
from .trace_context import TraceContext
from .tracing import handler_span

if TYPE_CHECKING:
    from .bus import Bus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    """What a handler knows about the event it is given."""

    stream: str
    partition: int
    position: int
    attempt: int
    replaying: bool


Handler = Callable[[Envelope[Any], Delivery], Awaitable[None]]


class ConsumerObserver(Protocol):
    """Hooks for metrics; the runtime plugs Prometheus in here."""

    def received(self, stream: str, pending: int | None) -> None: ...
    def handled(self, stream: str, seconds: float, partition: int | None = None) -> None: ...
    def dead_lettered(self, stream: str) -> None: ...
    def duplicate(self, stream: str) -> None: ...


class _NoObserver:
    def received(self, stream: str, pending: int | None) -> None: ...
    def handled(self, stream: str, seconds: float, partition: int | None = None) -> None: ...
    def dead_lettered(self, stream: str) -> None: ...
    def duplicate(self, stream: str) -> None: ...


def _seen_as(envelope: Envelope[Any]) -> str:
    return dedupe_key(envelope.cluster, envelope.key, envelope.id)


class SeenIds:
    """The events handled lately, by `intake.dedupe_key`: a duplicate (a
    redelivery after a lost ack, `ack_wait_s` 30 s; an event a retried
    publish stored twice) comes within seconds of the first.

    Ids are kept in two generations, the current one and the one before,
    swapped every `horizon_s / 2` seconds of this reader's clock or when the
    current one holds `capacity / 2`: an id is remembered for at least
    `horizon_s / 2` seconds unless the reader handles more than `capacity / 2`
    events in that time, and never more than `capacity` are kept. A count
    alone kept 200,000 per consumer, reached within minutes at 5,000 nodes'
    samples (about 40 MB for each per-node stream a service reads, the keys
    in an ordered dict); at 500 samples a second this keeps 30,000 to
    60,000, about 150 bytes each. An id is kept as a 96-bit digest of its
    key (a 48-byte object where 16 bytes took 64): two of 200,000 keys
    sharing one, which would drop an event, has odds below 1 in 10^18."""

    def __init__(self, capacity: int = 200_000, horizon_s: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._current: set[bytes] = set()
        self._previous: set[bytes] = set()
        self._capacity, self._horizon_s, self._clock = capacity, horizon_s, clock
        self._swapped = clock()

    @staticmethod
    def _digest(event_id: str) -> bytes:
        return blake2b(event_id.encode(), digest_size=12).digest()

    def _age(self) -> None:
        now = self._clock()
        if now - self._swapped >= self._horizon_s:
            self._previous, self._current, self._swapped = set(), set(), now
        elif now - self._swapped >= self._horizon_s / 2 or 2 * len(self._current) >= self._capacity:
            self._previous, self._current, self._swapped = self._current, set(), now

    def __contains__(self, event_id: str) -> bool:
        self._age()
        digest = self._digest(event_id)
        return digest in self._current or digest in self._previous

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)

    def add(self, event_id: str) -> None:
        self._age()
        digest = self._digest(event_id)
        if digest not in self._previous:
            self._current.add(digest)


@dataclass
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 0.1
    max_delay_s: float = 5.0

    def delay(self, attempt: int) -> float:
        """Back-off before attempt number `attempt + 1` (attempts count from 1)."""
        return min(self.base_delay_s * 2 ** (attempt - 1), self.max_delay_s)


class Consumer:
    """One consumer-group member running a handler over one stream."""

    def __init__(
        self,
        bus: "Bus",
        spec: StreamSpec,
        group: str,
        handler: Handler,
        *,
        start: StartAt,
        clusters: frozenset[str] | None = None,
        ordered: bool = True,
        replay_on_assign: bool = False,
        retry: RetryPolicy | None = None,
        seen: SeenIds | None = None,
        on_assign: Callable[[frozenset[int], frozenset[int]], Awaitable[None]] | None = None,
        observer: ConsumerObserver | None = None,
    ) -> None:
        self.bus = bus
        self.spec = spec
        self.group = group
        self.handler = handler
        self.start = start
        self.clusters = clusters
        self.ordered = ordered
        self.replay_on_assign = replay_on_assign
        self.retry = retry or RetryPolicy()
        self.seen = seen or SeenIds()
        self._on_assign_hook = on_assign
        self.observer: ConsumerObserver = observer or _NoObserver()
        self.subscription: GroupSubscription | None = None
        self.ready = asyncio.Event()
        self._stop_requested = False

    async def run(self) -> None:
        """Consume until `stop()` (graceful: the group is left cleanly and
        handled messages are committed) or cancellation (abrupt: like a
        crash, unacknowledged messages come back to the group later)."""
        self.subscription = await self.bus.backend.subscribe(
            self.spec, self.group, self.start, on_assign=self._assigned
        )
        if self._stop_requested:
            self.subscription.request_stop()
        self.ready.set()
        try:
            async for raw in self.subscription.messages():
                await self._handle(raw)
        finally:
            await asyncio.shield(self.subscription.close())

    def stop(self) -> None:
        """Ask `run()` to finish after the current message."""
        self._stop_requested = True
        if self.subscription is not None:
            self.subscription.request_stop()

    async def _assigned(self, sub: GroupSubscription, gained: frozenset[int], lost: frozenset[int]) -> None:
        if self._on_assign_hook is not None:
            await self._on_assign_hook(gained, lost)
        if self.replay_on_assign and gained:
            floors = {p: await sub.committed(p) for p in gained}
            await self._replay({p: f for p, f in floors.items() if f > 0})

    async def _replay(self, floors: dict[int, int]) -> None:
        if not floors:
            return
        count = 0
        async for raw in self.bus.backend.read(
            self.spec, StartAt.earliest(), partitions=frozenset(floors), until=floors
        ):
            try:
                envelope = accept(raw.data, self.spec.name, key=raw.key, cluster=raw.cluster)
            except SchemaError:
                continue  # it was dead-lettered when first seen
            seen_as = _seen_as(envelope)
            if not self._wanted(envelope) or seen_as in self.seen:
                continue
            delivery = Delivery(self.spec.name, raw.partition, raw.position, 1, replaying=True)
            try:
                await self.handler(envelope, delivery)
            except Exception as exc:
                log.warning("replay of %s %s failed: %s", self.spec.name, envelope.id, exc)
            self.seen.add(seen_as)
            count += 1
        log.info("%s/%s: replayed %d events of partitions %s", self.group, self.spec.name, count, sorted(floors))

    def _wanted(self, envelope: Envelope[Any]) -> bool:
        return self.clusters is None or envelope.cluster in self.clusters

    async def _handle(self, raw: RawMessage) -> None:
        self.observer.received(self.spec.name, raw.pending)
        try:
            envelope = accept(raw.data, self.spec.name, key=raw.key, cluster=raw.cluster)
        except SchemaError as exc:  # the message is the reason: oversized / undecodable / wrong stream / identity
            await self._dead_letter(raw, str(exc), retriable=False)
            return
        if not self._wanted(envelope):
            await raw.ack()
            return
        seen_as = _seen_as(envelope)
        if seen_as in self.seen:
            self.observer.duplicate(self.spec.name)
            await raw.ack()
            return
        attempt = raw.deliveries
        while True:
            started = time.perf_counter()
            span = handler_span(self.bus.source, self.group, envelope, raw.trace)
            try:
                delivery = Delivery(self.spec.name, raw.partition, raw.position, attempt, replaying=False)
                with span.current():
                    await self.handler(envelope, delivery)
            except asyncio.CancelledError as exc:
                span.end("cancelled", exc)
                raise
            except Exception as exc:
                retriable = is_retriable(exc)
                if not retriable or attempt >= self.retry.max_attempts:
                    span.end("dead-lettered", exc)
                    log.error("%s/%s: event %s failed (attempt %d): %r",
                              self.group, self.spec.name, envelope.id, attempt, exc)
                    await self._dead_letter(raw, f"handler failed: {exc!r}", retriable=retriable,
                                            attempts=attempt, envelope=envelope, trace=span.context)
                    return
                span.end("retrying", exc)
                log.warning("%s/%s: event %s attempt %d failed, retrying: %r",
                            self.group, self.spec.name, envelope.id, attempt, exc)
                if not self.ordered:
                    await raw.nak(self.retry.delay(attempt))
                    return
                await asyncio.sleep(self.retry.delay(attempt))
                attempt += 1
                continue
            span.end("ok")
            self.observer.handled(self.spec.name, time.perf_counter() - started, raw.partition)
            self.seen.add(seen_as)
            await raw.ack()
            return

    async def _dead_letter(self, raw: RawMessage, reason: str, *, retriable: bool, attempts: int | None = None,
                           envelope: Envelope[Any] | None = None, trace: TraceContext | None = None) -> None:
        await self.bus.dead_letter(
            raw.data, stream=self.spec.name, key=raw.key, consumer=self.group, reason=reason,
            retriable=retriable, deliveries=attempts or raw.deliveries, cause=envelope, trace=trace or raw.trace,
        )
        self.observer.dead_lettered(self.spec.name)
        await raw.ack()
