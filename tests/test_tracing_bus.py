"""Trace context through the bus, on a real NATS server and a real
Kafka-protocol broker: an output continues its cause's trace, an event
without a cause starts one, headers that are not a trace context start a
new trace and the event is handled as usual, and the trace never changes
what counts as a duplicate."""

from __future__ import annotations

import asyncio

import pytest

from builders import pod
from conftest import make_bus, patience, wait_until
from span_capture import parent_id, span_id, spans, trace_id  # noqa: F401  (spans is a fixture)
from tidal_bus import HandlerError, StartAt, tracing
from tidal_bus.kafka_records import record_key
from tidal_bus.nats_backend import NatsBackend
from tidal_bus.subjects import kafka_topic, nats_subject
from tidal_bus.trace_context import TraceContext
from tidal_schemas import BindResult, PlacementDecision, PlacementDecisions, encode, make_envelope
from tidal_schemas.streams import partition_for, stream

BAD_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture(params=["nats", "kafka"])
def bus_url(request) -> str:
    return request.getfixturevalue(f"{request.param}_server").url


def decision_for(envelope) -> PlacementDecisions:
    p = envelope.payload
    return PlacementDecisions.of(PlacementDecision(decision_id=f"d-{p.name}", namespace=p.namespace, name=p.name,
                                                   outcome="placed", node="n1"))


class Chain:
    """Two hops as services make them: `placement` decides on each pod
    event (publishing with the pod event as cause); `topology` takes the
    decisions in."""

    def __init__(self, url: str, namespace: str) -> None:
        self.url, self.namespace = url, namespace
        self.pods: list = []  # pod events placement handled
        self.decided: list = []
        self.handled: list = []  # decisions topology handled

    async def __aenter__(self) -> "Chain":
        self.placement = await make_bus(self.url, self.namespace, source="placement").__aenter__()
        self.topology = await make_bus(self.url, self.namespace, source="topology").__aenter__()

        async def decide(envelope, delivery) -> None:
            self.pods.append(envelope)
            self.decided.append(await self.placement.publish(decision_for(envelope), cause=envelope))

        async def take(envelope, delivery) -> None:
            self.handled.append(envelope)

        self.consumers = [self.placement.consumer("pod.lifecycle", "placement", decide),
                          self.topology.consumer("placement.decision", "topology", take)]
        self.tasks = [asyncio.create_task(c.run()) for c in self.consumers]
        await wait_until(lambda: all(c.ready.is_set() for c in self.consumers), 30, "consumers joined")
        return self

    async def __aexit__(self, *exc) -> None:
        for consumer in self.consumers:
            consumer.stop()
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), patience(30))
        for bus in (self.placement, self.topology):
            await bus.__aexit__(None, None, None)

    async def wait(self, count: int) -> None:
        await wait_until(lambda: len(self.handled) >= count, 30, f"{count} decisions handled")


async def trace_of(bus, stream_name: str, key: str) -> TraceContext | None:
    """The trace headers the broker holds for the latest event of `key`."""
    found = None
    async for raw, event in bus.read(stream_name, StartAt.earliest()):
        if raw.key == key:
            found = raw.trace
    return found


async def test_an_output_continues_its_causes_trace_with_a_span_per_hop(bus_url, namespace, spans):
    async with make_bus(bus_url, namespace, source="bridge") as bridge, Chain(bus_url, namespace) as chain:
        await bridge.publish(pod("p1"))
        await chain.wait(1)
        on_wire = await trace_of(bridge, "placement.decision", "default/p1")

    root = spans.one("bridge publish pod.lifecycle", key="default/p1")
    handled = spans.one("placement pod.lifecycle", key="default/p1")
    decided = spans.one("placement publish placement.decision", key="default/p1")
    taken = spans.one("topology placement.decision", key="default/p1")
    assert root.parent is None  # an event without a cause starts a trace
    assert {trace_id(s) for s in (root, handled, decided, taken)} == {trace_id(root)}
    # each hop is the child of the one before: publish -> handle -> publish -> handle
    assert parent_id(handled) == span_id(root)
    assert parent_id(decided) == span_id(handled)
    assert parent_id(taken) == span_id(decided)
    assert (on_wire.trace_id, on_wire.span_id) == (trace_id(decided), span_id(decided))
    assert handled.attributes["tidal.outcome"] == "ok"
    assert handled.attributes["tidal.event_id"] == chain.decided[0].causation_id
    assert handled.attributes["tidal.cluster"] == "c1" and handled.attributes["tidal.stream"] == "pod.lifecycle"
    assert handled.attributes["messaging.consumer.group.name"] == "placement"


async def test_without_spans_the_context_still_travels(bus_url, namespace):
    assert not tracing.spans_on()
    async with make_bus(bus_url, namespace, source="bridge") as bridge, Chain(bus_url, namespace) as chain:
        await bridge.publish(pod("p1"))
        await bridge.publish(pod("p2"))
        await chain.wait(2)
        pods = {k: await trace_of(bridge, "pod.lifecycle", k) for k in ("default/p1", "default/p2")}
        decisions = {k: await trace_of(bridge, "placement.decision", k) for k in ("default/p1", "default/p2")}
    assert pods["default/p1"].trace_id != pods["default/p2"].trace_id  # two events without a cause: two traces
    for key in pods:  # with nothing recording, the cause's context is passed on as it came
        assert decisions[key] == pods[key]


async def publish_with_headers(bus, envelope, headers: list[tuple[str, bytes]]) -> None:
    """Put an event on the broker with headers of our choosing, as another
    producer might, past the bus's own publishing."""
    spec, data = stream(envelope.type), encode(envelope)
    backend = bus.backend
    await backend.ensure_stream(spec)
    partition = partition_for(envelope.key, spec.partitions)
    if isinstance(backend, NatsBackend):
        subject = nats_subject(backend.namespace, spec, envelope.cluster, partition, envelope.key)
        await backend.js.publish(subject, data, headers={name: value.decode() for name, value in headers})
    else:
        await backend._producer.send_and_wait(kafka_topic(backend.namespace, spec), data, partition=partition,
                                              key=record_key(envelope.cluster, envelope.key).encode(),
                                              headers=headers)


MALFORMED = [
    [("traceparent", f"00-{BAD_TRACE}-zzzzzzzzzzzzzzzz-01".encode())],
    [("traceparent", f"00-{'0' * 32}-00f067aa0ba902b7-01".encode())],
    [("traceparent", f"ff-{BAD_TRACE}-00f067aa0ba902b7-01".encode())],
    [("traceparent", f"00-{BAD_TRACE}-00f067aa0ba902b7-01".encode() + b"x" * 4000)],
    [("traceparent", b"x" * 60_000)],
    [("tracestate", b"congo=t61rcWkgMzE")],
]


async def test_a_malformed_traceparent_starts_a_new_trace_and_the_event_is_handled(bus_url, namespace, spans):
    async with make_bus(bus_url, namespace, source="bridge") as bridge, Chain(bus_url, namespace) as chain:
        for i, headers in enumerate(MALFORMED):
            await publish_with_headers(bridge, make_envelope(pod(f"p{i}"), cluster="c1", source="bridge"), headers)
        await chain.wait(len(MALFORMED))
        letters = [e async for _, e in bridge.read("dead.letter", StartAt.earliest())]
    assert letters == []
    roots = [spans.one("placement pod.lifecycle", key=f"default/p{i}") for i in range(len(MALFORMED))]
    for i, root in enumerate(roots):
        assert root.parent is None and root.attributes["tidal.outcome"] == "ok", MALFORMED[i]
        assert trace_id(root) != BAD_TRACE
        taken = spans.one("topology placement.decision", key=f"default/p{i}")
        assert trace_id(taken) == trace_id(root)  # the new trace goes on from there
    assert len({trace_id(r) for r in roots}) == len(roots)


async def test_kafka_headers_that_are_not_text_or_are_repeated_start_a_new_trace(kafka_server, namespace):
    good = f"00-{BAD_TRACE}-00f067aa0ba902b7-01".encode()
    cases = {"twice": [("traceparent", good), ("traceparent", good)], "binary": [("traceparent", b"\xff\xfe" * 30)],
             "injected state": [("traceparent", good), ("tracestate", b"a=1\r\nNats-Msg-Id: x")]}
    async with make_bus(kafka_server.url, namespace, source="bridge") as bridge, \
            Chain(kafka_server.url, namespace) as chain:
        for name, headers in cases.items():
            await publish_with_headers(bridge, make_envelope(pod(name.replace(" ", "-")), cluster="c1",
                                                             source="bridge"), headers)
        await chain.wait(len(cases))
        decisions = {k: await trace_of(bridge, "placement.decision", f"default/{k}")
                     for k in ("twice", "binary", "injected-state")}
    assert decisions["twice"].trace_id != BAD_TRACE and decisions["binary"].trace_id != BAD_TRACE
    # a good traceparent with a bad tracestate keeps the trace and drops the state
    assert decisions["injected-state"].trace_id == BAD_TRACE and decisions["injected-state"].state == ""


async def test_the_trace_never_changes_what_is_a_duplicate(bus_url, namespace):
    """The same event sent twice in two different traces is handled once,
    and its output's id is the one derived from the cause alone."""
    async with make_bus(bus_url, namespace, source="bridge") as bridge, Chain(bus_url, namespace) as chain:
        envelope = make_envelope(pod("p1"), cluster="c1", source="bridge")
        first = TraceContext("1" * 32, "2" * 16, True)
        second = TraceContext("3" * 32, "4" * 16, True)
        await bridge.publish_envelope(envelope, trace=first)
        await bridge.publish_envelope(envelope, trace=second)
        # a later event of the same key: once it is handled, so is anything before it
        later = await bridge.publish(pod("p1", phase="running", node="n1"))
        await chain.wait(2)
        await asyncio.sleep(0.5)
    assert [e.id for e in chain.pods] == [envelope.id, later.id]
    expected = make_envelope(decision_for(envelope), cluster="c1", source="placement", cause=envelope)
    assert chain.decided[0].id == expected.id


async def test_a_dead_letter_stays_in_the_trace_of_the_event_that_failed(bus_url, namespace, spans):
    async def refuse(envelope, delivery) -> None:
        raise HandlerError("cannot place this", retriable=False)

    async with make_bus(bus_url, namespace, source="bridge") as bridge, \
            make_bus(bus_url, namespace, source="placement") as placement:
        consumer = placement.consumer("pod.lifecycle", "placement", refuse)
        task = asyncio.create_task(consumer.run())
        await wait_until(consumer.ready.is_set, 30, "consumer joined")
        sent = await bridge.publish(pod("p1"))
        await wait_until(lambda: spans.named("placement publish dead.letter"), 30, "the dead letter")
        consumer.stop()
        await asyncio.wait_for(task, patience(30))
        on_wire = await trace_of(bridge, "dead.letter", "pod.lifecycle")
    failed = spans.one("placement pod.lifecycle", event_id=sent.id)
    assert failed.attributes["tidal.outcome"] == "dead-lettered" and not failed.status.is_ok
    assert on_wire.trace_id == trace_id(failed) == trace_id(spans.one("bridge publish pod.lifecycle"))


def test_a_handler_span_continues_the_received_trace_and_the_vendors_state(spans):
    received = TraceContext(BAD_TRACE, "00f067aa0ba902b7", True, "congo=t61rcWkgMzE,rojo=1")
    envelope = make_envelope(pod("p1"), cluster="c1", source="bridge")
    span = tracing.handler_span("placement", "placement", envelope, received)
    span.end("ok")
    finished = spans.one("placement pod.lifecycle")
    assert (trace_id(finished), parent_id(finished)) == (BAD_TRACE, "00f067aa0ba902b7")
    assert span.context == TraceContext(BAD_TRACE, span_id(finished), True, "congo=t61rcWkgMzE,rojo=1")
    assert finished.context.trace_state.to_header() == "congo=t61rcWkgMzE,rojo=1"


ITEM_TRACES = [TraceContext("a" * 32, "1" * 16, True, "rojo=1"), TraceContext("b" * 32, "2" * 16, True)]


EVENT_TRACE = TraceContext("c" * 32, "3" * 16, True)


def _items(traces=None) -> PlacementDecisions:
    """An event of two decisions, each naming its own pod's trace."""
    traces = traces or [(c.headers()["traceparent"], c.state) for c in ITEM_TRACES]
    return PlacementDecisions.of(*(PlacementDecision(
        decision_id=f"d{i}", namespace="default", name=f"p{i}", outcome="placed", node="n1", trace=parent,
        trace_state=state) for i, (parent, state) in enumerate(traces)))


async def _process_items(url: str, namespace: str, event: PlacementDecisions | None = None) -> dict:
    """A bridge-like consumer handles each decision of one event inside
    `tracing.processing` and publishes a bind result for it; the results'
    trace headers on the wire, by pod."""
    async with make_bus(url, namespace, source="placement") as placement, \
            make_bus(url, namespace, source="bridge") as bridge:
        async def bind(envelope, delivery) -> None:
            for d in envelope.payload.items:
                with tracing.processing("bridge", "bridge", envelope, d):
                    await bridge.publish(BindResult(decision_id=d.decision_id, namespace=d.namespace, name=d.name,
                                                    node="n1", ok=True), cause=envelope, discriminator=d.decision_id)
        consumer = bridge.consumer("placement.decision", "bridge", bind)
        task = asyncio.create_task(consumer.run())
        await wait_until(consumer.ready.is_set, 30, "consumer joined")
        await placement.publish(event or _items(), trace=EVENT_TRACE)
        results = {}
        for _ in range(300):
            results = {raw.key: raw.trace async for raw, _ in bridge.read("bind.result", StartAt.earliest())}
            if len(results) == 2:
                break
            await asyncio.sleep(0.1)
        consumer.stop()
        await asyncio.wait_for(task, patience(30))
    return results


async def test_each_item_of_a_batch_event_is_handled_in_its_own_trace(bus_url, namespace):
    results = await _process_items(bus_url, namespace)
    # without spans, each decision's output goes on in the trace the decision names, as it came
    assert results == {"default/p0": ITEM_TRACES[0], "default/p1": ITEM_TRACES[1]}


async def test_each_item_of_a_batch_event_gets_a_span_in_its_own_trace(nats_server, namespace, spans):
    results = await _process_items(nats_server.url, namespace)
    for i, context in enumerate(ITEM_TRACES):
        key = f"default/p{i}"
        processed = spans.one("bridge process placement.decision", key=key)
        bound = spans.one("bridge publish bind.result", key=key)
        assert (trace_id(processed), parent_id(processed)) == (context.trace_id, context.span_id)
        assert parent_id(bound) == span_id(processed) and results[key].trace_id == context.trace_id
    event = spans.one("bridge placement.decision")  # the event's own span, in the trace its headers name
    assert trace_id(event) == EVENT_TRACE.trace_id


async def test_an_item_naming_no_valid_trace_is_handled_in_the_events(nats_server, namespace):
    bad = [(f"00-{BAD_TRACE}-zzzzzzzzzzzzzzzz-01", "congo=1"), ("", "")]
    results = await _process_items(nats_server.url, namespace, _items(bad))
    assert results == {"default/p0": EVENT_TRACE, "default/p1": EVENT_TRACE}
