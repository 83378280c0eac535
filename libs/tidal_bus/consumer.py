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

With `window` > 1 a handler's outputs are waited for a window of events
at a time, each event acked once its outputs are stored (output_window.py).

When the group hands this member a partition it already has history in,
the partition is first replayed up to the group's committed position with
`replaying=True`, so the handler rebuilds its state without repeating
effects (see `Delivery.replaying`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tidal_clock import elapsed
from tidal_schemas import Envelope, SchemaError
from tidal_schemas.streams import StreamSpec

from .api import GroupSubscription, RawMessage, StartAt
from .errors import is_retriable
from .intake import accept, dedupe_key
from .output_window import Handled, OutputWindow
from .seen_ids import SeenIds
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
        window: int = 1,
        linger_s: float = 0.0,
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
        self.window = OutputWindow(window, self._finish, f"{group}:{spec.name}")
        self.linger_s = linger_s  # see Backend.subscribe
        self.subscription: GroupSubscription | None = None
        self.ready = asyncio.Event()
        self._stop_requested = False

    async def run(self) -> None:
        """Consume until `stop()` (graceful: the group is left cleanly and
        handled messages are committed) or cancellation (abrupt: like a
        crash, unacknowledged messages come back to the group later)."""
        self.subscription = await self.bus.backend.subscribe(
            self.spec, self.group, self.start, on_assign=self._assigned, linger_s=self.linger_s
        )
        if self._stop_requested:
            self.subscription.request_stop()
        self.ready.set()
        try:
            async for raw in self.subscription.messages():
                await self._handle(raw)
            await self.window.drain()
        except BaseException:
            self.window.abandon()  # abrupt: like a crash, the events not acked come back
            raise
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
                envelope = accept(raw.data, self.spec.name, key=raw.key, cluster=raw.cluster, lane=raw.lane)
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
            envelope = accept(raw.data, self.spec.name, key=raw.key, cluster=raw.cluster, lane=raw.lane)
        except SchemaError as exc:  # the message is the reason: oversized / undecodable / wrong stream / identity
            await self._dead_letter(raw, str(exc), retriable=False)
            return
        if not self._wanted(envelope):
            await self._ack_in_turn(raw)
            return
        seen_as = _seen_as(envelope)
        if seen_as in self.seen:
            self.observer.duplicate(self.spec.name)
            await self._ack_in_turn(raw)
            return
        attempt = raw.deliveries
        while True:
            started = elapsed()
            span = handler_span(self.bus.source, self.group, envelope, raw.trace)
            outputs: list[asyncio.Future[Any]] = []
            try:
                delivery = Delivery(self.spec.name, raw.partition, raw.position, attempt, replaying=False)
                with span.current(), self.window.collecting() as outputs:
                    await self.handler(envelope, delivery)
            except asyncio.CancelledError as exc:
                span.end("cancelled", exc)
                for output in outputs:
                    output.cancel()
                raise
            except Exception as exc:
                if outputs:  # what it sent before failing is sent again by the next attempt (same ids)
                    await asyncio.gather(*outputs, return_exceptions=True)
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
                    await self.window.drain()  # the events handled before it are acked first
                    await raw.nak(self.retry.delay(attempt))
                    return
                await asyncio.sleep(self.retry.delay(attempt))
                attempt += 1
                continue
            span.end("ok")
            self.observer.handled(self.spec.name, elapsed() - started, raw.partition)
            if self.window.size == 1:
                self.seen.add(seen_as)
                await raw.ack()
                return
            await self.window.add(Handled(raw, seen_as, envelope, outputs, span.context))
            return

    async def _ack_in_turn(self, raw: RawMessage) -> None:
        """Ack an event skipped, after the events handled before it (a
        Kafka commit covers every offset below the one acked)."""
        if len(self.window):
            await self.window.add(Handled(raw, None))
        else:
            await raw.ack()

    async def _finish(self, handled: Handled) -> None:
        """An event of the window whose outputs are done: acked, or
        dead-lettered when one was not stored."""
        failed = handled.failure()
        if failed is None:
            if handled.seen_as is not None:
                self.seen.add(handled.seen_as)
            await handled.raw.ack()
            return
        log.error("%s/%s: an output of event %s was not published: %r",
                  self.group, self.spec.name, handled.envelope.id, failed)
        await self._letter(handled.raw, f"output not published: {failed!r}", retriable=is_retriable(failed),
                           envelope=handled.envelope, trace=handled.trace)

    async def _dead_letter(self, raw: RawMessage, reason: str, *, retriable: bool, attempts: int | None = None,
                           envelope: Envelope[Any] | None = None, trace: TraceContext | None = None) -> None:
        await self.window.drain()  # the events handled before it are acked first
        await self._letter(raw, reason, retriable=retriable, attempts=attempts, envelope=envelope, trace=trace)

    async def _letter(self, raw: RawMessage, reason: str, *, retriable: bool, attempts: int | None = None,
                      envelope: Envelope[Any] | None = None, trace: TraceContext | None = None) -> None:
        await self.bus.dead_letter(
            raw.data, stream=self.spec.name, key=raw.key, consumer=self.group, reason=reason,
            retriable=retriable, deliveries=attempts or raw.deliveries, cause=envelope, trace=trace or raw.trace,
        )
        self.observer.dead_lettered(self.spec.name)
        await raw.ack()
