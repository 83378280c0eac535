"""Trace context across services, and OpenTelemetry spans when asked for.

Propagation is always on and costs a header: every event carries a W3C
`traceparent` (trace_context.py). An event published as the output of
another (`Bus.publish(..., cause=…)`) continues the cause's trace; one
with no cause starts a new trace; placement, whose decisions have no
cause, continues the trace of the pod's last event (`TraceBook.last`).

Spans are off by default: nothing here imports OpenTelemetry until a
tracer provider is installed with `use()` (the runtime does so from the
OTEL_… environment, see tidal_runtime.tracing_setup). Then every handler
invocation gets a CONSUMER span (`"{service} {stream}"`) and every
publish a PRODUCER span (`"{service} publish {stream}"`), with the
stream, key, event id, cluster and outcome as attributes.

The book remembers contexts by the accepted event's own identity (type,
cluster, key, id), never by anything the headers say.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from tidal_schemas import Envelope

from .trace_context import TraceContext, new_trace

_provider: Any = None  # an opentelemetry TracerProvider, or None: spans off
_tracer: Any = None


def use(provider: Any) -> Any:
    """Record spans with `provider` (an OpenTelemetry TracerProvider; None
    turns spans off); returns the one used before."""
    global _provider, _tracer
    previous, _provider = _provider, provider
    _tracer = provider.get_tracer("tidal_bus") if provider is not None else None
    return previous


def spans_on() -> bool:
    """Whether spans are recorded (a provider is installed)."""
    return _tracer is not None


class TraceBook:
    """The trace context of the events a bus handled or published lately,
    one per (stream, cluster, key), at most `capacity` (least recent go)."""

    def __init__(self, capacity: int = 50_000) -> None:
        self._entries: OrderedDict[tuple[str, str, str], tuple[str, TraceContext]] = OrderedDict()
        self._capacity = capacity

    def remember(self, envelope: Envelope[Any], context: TraceContext) -> None:
        where = (envelope.type, envelope.cluster, envelope.key)
        self._entries[where] = (envelope.id, context)
        self._entries.move_to_end(where)
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def of(self, envelope: Envelope[Any]) -> TraceContext | None:
        """The context `envelope` was handled or published in, if remembered."""
        entry = self._entries.get((envelope.type, envelope.cluster, envelope.key))
        return entry[1] if entry is not None and entry[0] == envelope.id else None

    def last(self, stream: str, cluster: str, key: str) -> TraceContext | None:
        """The context of the latest event remembered for `key` on `stream`."""
        entry = self._entries.get((stream, cluster, key))
        return entry[1] if entry is not None else None


class HandlerSpan:
    """A handler invocation's span; `end(outcome)` once. Without a provider,
    a do-nothing stand-in."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make the span the current one while the handler runs, so spans
        the handler's own libraries make nest under it."""
        if self._span is None:
            yield
            return
        from opentelemetry import trace

        with trace.use_span(self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield

    def end(self, outcome: str, error: BaseException | None = None) -> None:
        if self._span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("tidal.outcome", outcome)
        if error is not None:
            self._span.record_exception(error)
            self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:300]))
        self._span.end()
        self._span = None


_OFF = HandlerSpan()


def handler_span(book: TraceBook, service: str, group: str, envelope: Envelope[Any],
                 received: TraceContext | None, *, record: bool = True) -> HandlerSpan:
    """Start the span of one handler invocation for `envelope`, which came
    with the context `received` (None: none or malformed, so a new trace
    starts here), and remember the context its outputs continue. With
    `record` false (catching up on history) nothing is recorded."""
    if _tracer is None or not record:
        book.remember(envelope, received or new_trace())
        return _OFF
    span = _start(f"{service} {envelope.type}", "CONSUMER", received, _attributes(service, envelope, group))
    book.remember(envelope, _context_of(span, received))
    return HandlerSpan(span)


@contextlib.contextmanager
def publishing(service: str, envelope: Envelope[Any], parent: TraceContext | None) -> Iterator[TraceContext]:
    """The context to send `envelope` with: `parent`'s trace (a new one
    when None), under a PRODUCER span that lasts until the broker's ack."""
    if _tracer is None:
        yield parent or new_trace()
        return
    span = _start(f"{service} publish {envelope.type}", "PRODUCER", parent, _attributes(service, envelope, None))
    outcome, error = "ok", None
    try:
        yield _context_of(span, parent)
    except BaseException as exc:
        outcome, error = "failed", exc
        raise
    finally:
        HandlerSpan(span).end(outcome, error)


def _attributes(service: str, envelope: Envelope[Any], group: str | None) -> dict[str, str]:
    attributes = {"tidal.service": service, "tidal.stream": envelope.type, "tidal.key": envelope.key,
                  "tidal.event_id": envelope.id, "tidal.cluster": envelope.cluster}
    if group:
        attributes["messaging.consumer.group.name"] = group
    return attributes


def _start(name: str, kind: str, parent: TraceContext | None, attributes: dict[str, str]) -> Any:
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState

    if parent is None:
        within = context.Context()  # a new trace, whatever span is current in this task
    else:
        remote = SpanContext(int(parent.trace_id, 16), int(parent.span_id, 16), is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED if parent.sampled else TraceFlags.DEFAULT),
                             trace_state=_state(parent.state, TraceState))
        within = trace.set_span_in_context(NonRecordingSpan(remote), context.Context())
    return _tracer.start_span(name, context=within, kind=getattr(SpanKind, kind), attributes=attributes)


def _state(text: str, state_class: Any) -> Any:
    if not text:
        return None
    return state_class([tuple(member.split("=", 1)) for member in text.split(",")])


def _context_of(span: Any, parent: TraceContext | None) -> TraceContext:
    """The context a span's outputs carry: the span itself, or `parent`
    passed on when the provider made no valid span."""
    made = span.get_span_context()
    if not made.is_valid:
        return parent or new_trace()
    return TraceContext(f"{made.trace_id:032x}", f"{made.span_id:016x}", made.trace_flags.sampled,
                        parent.state if parent is not None else "")
