"""The `Bus`: publish events and run consumers, whatever the broker.

    async with Bus.from_url("nats://127.0.0.1:4222", cluster="prod", source="oversell") as bus:
        await bus.publish(NodeAction(...), cause=envelope)
        await bus.consumer("node.metrics", "oversell", handle).run()
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import logging
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from contextlib import ExitStack
from typing import Any

from tidal_schemas import DeadLetter, Envelope, Payload, SchemaError, encode, make_envelope
from tidal_schemas.errors import IdentityError
from tidal_schemas.streams import STREAMS, StreamSpec, lane_of, stream

from .api import Backend, RawMessage, StartAt
from .backends import backend_from_url
from .consumer import Consumer, Handler
from .intake import MAX_EVENT_BYTES, accept, check_size, dedupe_key
from .output_window import deferred_outputs
from .read_back import ReadBack
from .seen_ids import SeenIds
from .subjects import check_namespace
from .trace_context import TraceContext, new_trace
from .tracing import handler_span, publishing, spans_on, trace_of

log = logging.getLogger(__name__)



class Bus:
    """A connected backend plus the identity this process publishes under."""

    def __init__(self, backend: Backend, *, cluster: str, source: str) -> None:
        self.backend = backend
        self.cluster = cluster
        self.source = source
        self.refused: Counter[str] = Counter()  # per stream: events read without a group and refused as forged
        self._read_back = ReadBack()

    def reads_back(self, *stream_names: str) -> None:
        """This process reads back what it publishes on `stream_names`:
        `read` hands it the envelope it published, not a decode of its
        bytes (read_back.py)."""
        self._read_back.streams |= {stream(n).name for n in stream_names}

    @classmethod
    def from_url(cls, url: str, *, namespace: str = "tidal", cluster: str, source: str, **options: Any) -> "Bus":
        return cls(backend_from_url(url, check_namespace(namespace), **options), cluster=cluster, source=source)

    async def __aenter__(self) -> "Bus":
        await self.backend.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.backend.close()

    async def ensure_streams(self, names: list[str] | None = None) -> None:
        """Create every stream (or those named) so consumers can start first."""
        for name in names or list(STREAMS):
            await self.backend.ensure_stream(stream(name))

    async def publish(
        self,
        payload: Payload,
        *,
        cause: Envelope[Any] | None = None,
        event_id: str | None = None,
        discriminator: str = "",
        cluster: str | None = None,
        trace: TraceContext | None = None,
    ) -> Envelope[Any]:
        """Wrap and publish `payload`; an output of `cause` belongs to the
        cause's cluster and gets an id derived from it (idempotent). It
        continues `trace`, else the trace of `cause` when that is the event
        being handled (tracing.trace_of), else starts a trace."""
        envelope = make_envelope(
            payload,
            cluster=cluster or (cause.cluster if cause is not None else self.cluster),
            source=self.source,
            cause=cause,
            event_id=event_id,
            discriminator=discriminator,
        )
        parent = trace or (trace_of(cause) if cause is not None else None)
        outputs = deferred_outputs()
        if outputs is None:
            with publishing(self.source, envelope, parent) as sent:
                await self.publish_envelope(envelope, trace=sent)
        else:  # the consumer handling `cause` waits for the ack (output_window.py)
            acked = await self._hand_over(envelope, parent)
            # In a context of its own: the current one holds `outputs`, which holds this task, and that
            # cycle would leave every output's envelope to the cyclic garbage collector.
            outputs.append(asyncio.get_running_loop().create_task(acked, context=contextvars.Context()))
        return envelope

    async def _hand_over(self, envelope: Envelope[Any], parent: TraceContext | None) -> Coroutine[Any, Any, Any]:
        """Send `envelope` behind what was sent before it; the awaitable
        returned waits for its ack (and ends its publish span then)."""
        if not spans_on():  # no span to end at the ack: what the backend returns is all there is to wait for
            return await self.backend.send(stream(envelope.type), envelope.cluster, envelope.key,
                                           self._encoded(envelope), envelope.id, parent or new_trace(),
                                           lane_of(envelope.payload))
        with ExitStack() as stack:
            sent = stack.enter_context(publishing(self.source, envelope, parent))
            stored = await self.backend.send(stream(envelope.type), envelope.cluster, envelope.key,
                                             self._encoded(envelope), envelope.id, sent, lane_of(envelope.payload))
            span = stack.pop_all()

        async def acked() -> None:
            with span:
                await stored
        return acked()

    async def publish_envelope(self, envelope: Envelope[Any], *, trace: TraceContext | None = None) -> int:
        """Publish an envelope as it is, in `trace` (None: no trace
        headers); returns its stream position. EventTooLarge (not
        retriable) above MAX_EVENT_BYTES."""
        return await self.backend.publish(stream(envelope.type), envelope.cluster, envelope.key,
                                          self._encoded(envelope), envelope.id, trace, lane_of(envelope.payload))

    def _encoded(self, envelope: Envelope[Any]) -> bytes:
        data = encode(envelope)
        check_size(len(data), f"{envelope.type} event {envelope.id}")
        self._read_back.published(envelope, data)
        return data

    async def publish_raw(self, stream_name: str, key: str, data: bytes, *, cluster: str | None = None) -> int:
        """Publish bytes that are not (necessarily) an event: tests and tools.
        The size limit holds here too."""
        check_size(len(data), f"message to {stream_name}")
        return await self.backend.publish(stream(stream_name), cluster or self.cluster, key, data, "")

    async def dead_letter(
        self,
        data: bytes,
        *,
        stream: str,
        key: str,
        consumer: str,
        reason: str,
        retriable: bool = False,
        deliveries: int = 1,
        cause: Envelope[Any] | None = None,
        trace: TraceContext | None = None,
    ) -> None:
        """Keep an event that could not be handled, with why, in `dead.letter`
        (in the trace of the event, `trace`)."""
        letter = DeadLetter(
            stream=stream, key=key, consumer=consumer, reason=reason[:2000], retriable=retriable,
            deliveries=deliveries, original_b64=base64.b64encode(data[:MAX_EVENT_BYTES // 2]).decode(),
            original_size=len(data),
        )
        log.warning("dead letter from %s on %s: %s", consumer, stream, reason)
        await self.publish(letter, cause=cause, discriminator=consumer, trace=trace)

    def consumer(self, stream_name: str, group: str, handler: Handler, *, start: StartAt | None = None,
                 **options: Any) -> Consumer:
        """A consumer-group member for `handler`; call `run()` to consume."""
        return Consumer(self, stream(stream_name), group, handler, start=start or StartAt.earliest(), **options)

    async def catch_up_then_follow(
        self, stream_name: str, on_event, on_caught_up, *, linger_s: float = 0.0, main_lane_only: bool = False,
        with_raw: bool = False
    ) -> None:
        """Read a stream from its start without a group: hand every event to
        `on_event`, call `on_caught_up` once the backlog present at the start
        is done, then keep following (in batches that linger `linger_s`, see
        `Backend.subscribe`; without the stream's side lane if
        `main_lane_only`). For state every replica needs whole (e.g. the
        table of running pods). `with_raw`: `on_event(event, raw message)`."""
        last: dict[int, int] = {}
        seen = SeenIds()  # a retried publish may have stored an event twice (StreamSpec.written_by_nodes)

        async def hand_over(raw: RawMessage, event: Envelope[Any] | SchemaError, live: bool) -> None:
            if isinstance(event, SchemaError):
                return
            key = dedupe_key(event.cluster, event.key, event.id)
            if key in seen:
                return
            seen.add(key)
            span = handler_span(self.source, "", event, raw.trace, record=live)
            try:
                with span.current():
                    await (on_event(event, raw) if with_raw else on_event(event))
            except BaseException as exc:
                span.end("failed", exc)
                raise
            span.end("ok")

        async for raw, event in self.read(stream_name, StartAt.earliest(), main_lane_only=main_lane_only):
            last[raw.partition] = raw.position
            await hand_over(raw, event, live=False)
        await on_caught_up()
        async for raw, event in self.read(stream_name, StartAt.after(last), follow=True, linger_s=linger_s,
                                          main_lane_only=main_lane_only):
            await hand_over(raw, event, live=True)

    async def read(
        self, stream_name: str, start: StartAt, *, follow: bool = False, linger_s: float = 0.0,
        main_lane_only: bool = False
    ) -> AsyncIterator[tuple[RawMessage, Envelope[Any] | SchemaError]]:
        """Read a stream without a group: each message with its decoded
        event, or the SchemaError that says why it is refused (see
        `intake.accept`: oversized, undecodable, wrong stream, identity);
        `main_lane_only`: without the stream's side lane (`StreamSpec.side_lane`)."""
        spec: StreamSpec = stream(stream_name)
        async for raw in self.backend.read(spec, start, follow=follow, linger_s=linger_s,
                                           main_lane_only=main_lane_only):
            mine = self._read_back.taken(raw, spec.name)
            if mine is not None:
                yield raw, mine
                continue
            try:
                yield raw, accept(raw.data, spec.name, key=raw.key, cluster=raw.cluster, lane=raw.lane)
            except IdentityError as exc:  # a forgery: say so, though readers do not file dead letters
                self.refused[spec.name] += 1
                log.warning("refused on %s at %d: %s", spec.name, raw.position, exc)
                yield raw, exc
            except SchemaError as exc:
                yield raw, exc
