"""Which trace a decision continues (`tidal_placement.pod_traces`): its pod's
pending event's while the pod waits; a placed decision ends it, so the
traces of placed pods are not kept, and a placement after a rollback
starts its own."""

from __future__ import annotations

from builders import pod
from tidal_bus.tracing import handler_span
from tidal_placement.pod_traces import PodTraces
from tidal_bus.trace_context import carried_by
from tidal_schemas import make_envelope


def read(traces: PodTraces, payload) -> object:
    """`traces` reads `payload` while handling it, as the service does; the trace it was handled in."""
    envelope = make_envelope(payload, cluster="c1", source="test")
    span = handler_span("placement", "", envelope, None, record=False)
    with span.current():
        traces.read(envelope)
    return span.context


def test_a_waiting_pods_decisions_continue_its_trace_until_it_is_placed():
    traces = PodTraces()
    trace = read(traces, pod("p"))
    assert trace is not None and len(traces) == 1
    assert traces.of("c1", "default/p", placed=False) == trace
    assert traces.of("c1", "default/p", placed=False) == trace  # still waiting: kept
    assert traces.of("c2", "default/p", placed=True) is None  # another cluster's pod of that name
    assert traces.of("c1", "default/p", placed=True) == trace
    assert len(traces) == 0 and traces.of("c1", "default/p", placed=True) is None


def test_a_decision_names_its_pods_trace_in_its_fields():
    traces = PodTraces()
    trace = read(traces, pod("p"))
    fields = traces.fields("c1", "default/p", placed=True)
    assert fields == {"trace": trace.headers()["traceparent"], "trace_state": ""}
    assert carried_by(fields["trace"], fields["trace_state"]) == trace
    assert traces.fields("c1", "default/p", placed=True) == {}  # placed: the pod's trace ended there


def test_a_pod_no_longer_pending_or_not_ours_leaves_no_trace():
    traces = PodTraces()
    read(traces, pod("p"))
    read(traces, pod("p", phase="running", node="n1"))
    assert len(traces) == 0
    read(traces, pod("p", foreign=True))
    assert len(traces) == 0
