"""Trace context across services, and OpenTelemetry spans when asked for.

Propagation is always on and costs a header: every event carries a W3C
`traceparent` (trace_context.py). An event published as the output of the
event being handled (`Bus.publish(..., cause=…)` inside the handler, or
in a task it started) continues that event's trace; one with no cause
starts a new trace. Placement, whose decisions have no cause, keeps the
trace of each pending pod's event (`current_trace()`) and passes it on.

Spans are off by default: nothing here imports OpenTelemetry until a
tracer provider is installed with `use()` (the runtime does so from the
OTEL_… environment, see tidal_runtime.tracing_setup). Then every handler
invocation gets a CONSUMER span (`"{service} {stream}"`) and every
publish a PRODUCER span (`"{service} publish {stream}"`), with the
stream, key, event id, cluster and outcome as attributes.

An event holding many items (placement's decisions, a cycle's in one
event) names one trace in its headers, and each item names its own in its
fields: `created` gives an item its context (with spans on, a PRODUCER span
`"{service} create {stream}"` in the item's trace), and a consumer handles
each item inside `processing` (with spans on, a CONSUMER span
`"{service} process {stream}"`), so what it publishes for the item
continues the item's trace.

The event being handled is known by its accepted identity (type, cluster,
key, id), never by anything its headers say.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from tidal_schemas import Envelope

from .trace_context import TraceContext, carried_by, new_trace

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


_handling: ContextVar[tuple[Envelope[Any], TraceContext] | None] = ContextVar("tidal_handling", default=None)


def current_trace() -> TraceContext | None:
    """The trace context of the event this task is handling, if any."""
    handling = _handling.get()
    return handling[1] if handling is not None else None


def trace_of(cause: Envelope[Any]) -> TraceContext | None:
    """The context to continue for an output of `cause`: that of the event
    being handled when it is `cause`, else None (a new trace)."""
    handling = _handling.get()
    if handling is None:
        return None
    envelope, context = handling
    if envelope is cause or (envelope.id == cause.id and envelope.key == cause.key
                             and envelope.cluster == cause.cluster and envelope.type == cause.type):
        return context
    return None


class HandlerSpan:
    """One handler invocation: `current()` around the handler call makes
    its event the one being handled (and its span, if any, the current
    span); `end(outcome)` once. `context` is what its outputs continue."""

    __slots__ = ("envelope", "context", "_span")

    def __init__(self, envelope: Envelope[Any], context: TraceContext, span: Any = None) -> None:
        self.envelope, self.context, self._span = envelope, context, span

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        token = _handling.set((self.envelope, self.context))
        try:
            if self._span is None:
                yield
            else:
                from opentelemetry import trace

                # spans the handler's own libraries make nest under this one
                with trace.use_span(self._span, end_on_exit=False, record_exception=False,
                                    set_status_on_exception=False):
                    yield
        finally:
            _handling.reset(token)

    def end(self, outcome: str, error: BaseException | None = None) -> None:
        if self._span is not None:
            _finish(self._span, outcome, error)
            self._span = None


def handler_span(service: str, group: str, envelope: Envelope[Any], received: TraceContext | None, *,
                 record: bool = True) -> HandlerSpan:
    """Start one handler invocation for `envelope`, which came with the
    context `received` (None: none or malformed, so a new trace starts
    here). With `record` false (catching up on history) no span is made."""
    if _tracer is None or not record:
        return HandlerSpan(envelope, received or new_trace())
    span = _start(f"{service} {envelope.type}", "CONSUMER", received, _attributes(service, envelope, group))
    return HandlerSpan(envelope, _context_of(span, received), span)


def created(service: str, stream: str, cluster: str, key: str, parent: TraceContext | None) -> TraceContext | None:
    """The context an item about `key` of a batch event carries: `parent`
    (None: none), or with spans on a PRODUCER span's in `parent`'s trace
    (a new one when None) marking the item made."""
    if _tracer is None:
        return parent
    span = _start(f"{service} create {stream}", "PRODUCER", parent,
                  {"tidal.service": service, "tidal.stream": stream, "tidal.key": key, "tidal.cluster": cluster})
    context = _context_of(span, parent)
    _finish(span, "ok", None)
    return context


@contextlib.contextmanager
def processing(service: str, group: str, envelope: Envelope[Any], item: Any) -> Iterator[None]:
    """Handle `item` of the event `envelope` (being handled) in the trace
    the item names (its `trace` and `trace_state`; none: the event's):
    outputs of `envelope` published inside continue it; with spans on,
    inside a CONSUMER span keyed by the item's `event_key()`."""
    handling = _handling.get()
    parent = carried_by(item.trace, item.trace_state) or (handling[1] if handling is not None else None)
    span = None
    if _tracer is not None:
        span = _start(f"{service} process {envelope.type}", "CONSUMER", parent,
                      {**_attributes(service, envelope, group), "tidal.key": item.event_key()})
    handled = HandlerSpan(envelope, _context_of(span, parent) if span is not None else parent or new_trace(), span)
    try:
        with handled.current():
            yield
    except BaseException as exc:
        handled.end("failed", exc)
        raise
    handled.end("ok")


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
        _finish(span, outcome, error)


def _attributes(service: str, envelope: Envelope[Any], group: str | None) -> dict[str, str]:
    attributes = {"tidal.service": service, "tidal.stream": envelope.type, "tidal.key": envelope.key,
                  "tidal.event_id": envelope.id, "tidal.cluster": envelope.cluster}
    if group:
        attributes["messaging.consumer.group.name"] = group
    return attributes


def _finish(span: Any, outcome: str, error: BaseException | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("tidal.outcome", outcome)
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:300]))
    span.end()


def _start(name: str, kind: str, parent: TraceContext | None, attributes: dict[str, str]) -> Any:
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState

    if parent is None:
        within = context.Context()  # a new trace, whatever span is current in this task
    else:
        remote = SpanContext(int(parent.trace_id, 16), int(parent.span_id, 16), is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED if parent.sampled else TraceFlags.DEFAULT),
                             trace_state=TraceState([tuple(m.split("=", 1)) for m in parent.state.split(",")])
                             if parent.state else None)
        within = trace.set_span_in_context(NonRecordingSpan(remote), context.Context())
    return _tracer.start_span(name, context=within, kind=getattr(SpanKind, kind), attributes=attributes)


def _context_of(span: Any, parent: TraceContext | None) -> TraceContext:
    """The context a span's outputs carry: the span itself, or `parent`
    passed on when the provider made no valid span."""
    made = span.get_span_context()
    if not made.is_valid:
        return parent or new_trace()
    return TraceContext(f"{made.trace_id:032x}", f"{made.span_id:016x}", made.trace_flags.sampled,
                        parent.state if parent is not None else "")
