"""W3C trace context headers: what parses, what is ignored (a new trace
starts instead), and that only what parsed is ever sent on."""

from __future__ import annotations

import pytest

from tidal_bus.trace_context import (
    MAX_TRACESTATE, TraceContext, carried, new_trace, parse_traceparent, parse_tracestate,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
GOOD = f"00-{TRACE}-{SPAN}-01"


@pytest.mark.parametrize("text, expected", [
    (GOOD, TraceContext(TRACE, SPAN, True)),
    (f"00-{TRACE}-{SPAN}-00", TraceContext(TRACE, SPAN, False)),
    (f"00-{TRACE}-{SPAN}-03", TraceContext(TRACE, SPAN, True)),  # unknown flag bits: sampled is bit 0
    (f"01-{TRACE}-{SPAN}-01-more-fields", TraceContext(TRACE, SPAN, True)),  # a later version may add fields
    (f"00-{TRACE}-{SPAN}-01-extra", None),  # version 00 has exactly four fields
    (f"01-{TRACE}-{SPAN}-01extra", None),  # fields are '-' separated
    (f"ff-{TRACE}-{SPAN}-01", None),  # version ff is forbidden
    (f"00-{'0' * 32}-{SPAN}-01", None),  # zero trace id
    (f"00-{TRACE}-{'0' * 16}-01", None),  # zero span id
    (f"00-{TRACE.upper()}-{SPAN}-01", None),  # upper-case hex
    (f"00-{TRACE[:-1]}-{SPAN}-01", None),  # short trace id
    (f"00_{TRACE}_{SPAN}_01", None),
    ("", None),
    ("garbage", None),
    (f"01-{TRACE}-{SPAN}-01-" + "x" * 300, None),  # over the length bound
])
def test_traceparent(text, expected):
    assert parse_traceparent(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("congo=t61rcWkgMzE", "congo=t61rcWkgMzE"),
    ("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    ("tenant@vendor=v1,,\t other=2 ", "tenant@vendor=v1,other=2"),
    ("a=1,a=2", ""),  # a key twice
    ("Upper=1", ""),  # keys are lower case
    ("a=1\r\nx-injected: yes", ""),  # no control characters reach another header
    ("a=b=c", ""),  # '=' is not allowed in a value
    ("a=", ""),  # a value has at least one character
    (",".join(f"k{i}=v" for i in range(33)), ""),  # over 32 members
    ("a=" + "v" * MAX_TRACESTATE, ""),  # over the length bound
])
def test_tracestate(text, expected):
    assert parse_tracestate(text) == expected


def test_headers_carry_a_context_and_ignore_what_is_not_one():
    assert carried([("traceparent", GOOD.encode()), ("tracestate", b"congo=1")]) == \
        TraceContext(TRACE, SPAN, True, "congo=1")
    assert carried({"traceparent": GOOD, "Nats-Msg-Id": "x"}.items()) == TraceContext(TRACE, SPAN, True)
    # a bad tracestate is dropped, the traceparent kept
    assert carried([("traceparent", GOOD), ("tracestate", "a=1\r\nb")]) == TraceContext(TRACE, SPAN, True)
    assert carried([("tracestate", b"congo=1")]) is None  # state without a parent
    assert carried([("traceparent", GOOD), ("traceparent", GOOD)]) is None  # given twice
    assert carried([("traceparent", GOOD.encode("utf-16"))]) is None  # not ASCII
    assert carried([("traceparent", b"\xff" * 55)]) is None
    assert carried([("traceparent", "0" * 100_000)]) is None
    assert carried([("Traceparent", GOOD)]) is None  # header names as W3C writes them


def test_what_is_sent_is_reformatted_never_passed_through():
    context = carried([("traceparent", f"01-{TRACE}-{SPAN}-03-future"), ("tracestate", " a=1 ,b=2")])
    assert context.headers() == {"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": "a=1,b=2"}
    assert parse_traceparent(context.headers()["traceparent"]) == TraceContext(TRACE, SPAN, True)


def test_a_new_trace_is_valid_unsampled_and_new_each_time():
    first, second = new_trace(), new_trace()
    assert parse_traceparent(first.headers()["traceparent"]) == first
    assert not first.sampled and first.trace_id != second.trace_id
