"""W3C Trace Context (https://www.w3.org/TR/trace-context/) as message
headers: parsing what arrives, formatting what leaves.

Headers come from any producer, so they are input like any other: a value
that is too long, not text, repeated, or not of the W3C form is ignored
(the event starts a new trace), never an error. Only what parsed is sent
on, always re-formatted by `TraceContext.headers()`, so no received byte
reaches another broker's headers as it came (a CR/LF in a Kafka header
must not become a NATS header line).

The trace context only ever names a trace: nothing in it reaches an event's
id, its dedupe key or the identity checks (see docs/security.md).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
MAX_TRACEPARENT = 256  # version 00 is 55 characters; later versions may append fields
MAX_TRACESTATE = 512  # what W3C asks every vendor to carry at least; longer ones are dropped
MAX_STATE_MEMBERS = 32

_PARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_KEY = r"(?:[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13}|[a-z][_0-9a-z\-*/]{0,255})"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = re.compile(f"({_KEY})=({_VALUE})")
_SAMPLED = 0x01


@dataclass(frozen=True, slots=True)
class TraceContext:
    """Where an event sits in a trace: the trace, the span that sent it,
    whether that span was sampled, and the vendors' `tracestate` ("" = none)."""

    trace_id: str  # 32 lowercase hex digits, not all zero
    span_id: str  # 16 lowercase hex digits, not all zero
    sampled: bool = False
    state: str = ""

    def headers(self) -> dict[str, str]:
        """The headers that carry this context (version 00)."""
        out = {TRACEPARENT: f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"}
        if self.state:
            out[TRACESTATE] = self.state
        return out


def new_trace() -> TraceContext:
    """The start of a new trace, not sampled: nothing recorded it."""
    return TraceContext(f"{random.getrandbits(128) or 1:032x}", f"{random.getrandbits(64) or 1:016x}")


def parse_traceparent(text: str) -> TraceContext | None:
    """The context in a `traceparent` value, or None when it is not one:
    wrong form, version ff, a zero trace or span id, or version 00 with
    anything after the flags. Later versions may carry more fields after a
    '-', which are not understood and not sent on."""
    if len(text) > MAX_TRACEPARENT:
        return None
    found = _PARENT.match(text)
    if found is None:
        return None
    version, trace_id, span_id, flags = found.groups()
    rest = text[found.end():]
    if version == "ff" or (version == "00" and rest) or (rest and not rest.startswith("-")):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceContext(trace_id, span_id, bool(int(flags, 16) & _SAMPLED))


def parse_tracestate(text: str) -> str:
    """A `tracestate` value cleaned of optional whitespace, or "" when it
    is too long, has over 32 members, repeats a key or holds a member that
    is not `key=value` of the W3C grammar (then the whole value is dropped)."""
    if len(text) > MAX_TRACESTATE:
        return ""
    members = [m.strip(" \t") for m in text.split(",")]
    members = [m for m in members if m]
    if len(members) > MAX_STATE_MEMBERS:
        return ""
    keys: set[str] = set()
    for member in members:
        found = _MEMBER.fullmatch(member)
        if found is None or found.group(1) in keys:
            return ""
        keys.add(found.group(1))
    return ",".join(members)


def carried(headers: Iterable[tuple[str, str | bytes]]) -> TraceContext | None:
    """The trace context in a message's headers (NATS' name -> value items,
    Kafka's (name, bytes) pairs), or None when there is none or it does not
    parse. A header given twice counts as not given."""
    values: dict[str, str | bytes | None] = {}
    for name, value in headers:
        if name in (TRACEPARENT, TRACESTATE):
            values[name] = None if name in values else value
    parent = _text(values.get(TRACEPARENT), MAX_TRACEPARENT)
    if parent is None:
        return None
    context = parse_traceparent(parent)
    if context is None:
        return None
    state = _text(values.get(TRACESTATE), MAX_TRACESTATE)
    if state:
        cleaned = parse_tracestate(state)
        if cleaned:
            return TraceContext(context.trace_id, context.span_id, context.sampled, cleaned)
    return context


def carried_by(traceparent: str, tracestate: str = "") -> TraceContext | None:
    """The context an item of a batch event names in its own fields (the
    event's headers name one trace only), as `carried` reads headers."""
    if not traceparent:
        return None
    return carried(((TRACEPARENT, traceparent), (TRACESTATE, tracestate)))


def _text(value: str | bytes | None, limit: int) -> str | None:
    """A header value as text, when it is short enough to look at and ASCII."""
    if value is None or len(value) > limit:
        return None
    if isinstance(value, bytes):
        try:
            return value.decode("ascii")
        except UnicodeDecodeError:
            return None
    return value if value.isascii() else None
