"""Garbage on the wire: the central services (scoring, placement, oversell,
remediation) and a node agent run over a real NATS server; random bytes and
structured-but-wrong events are published to every stream they read.

Afterwards every service is still running and ready; every bad message that
reached a consumer group is in `dead.letter` once per group, with a reason
and its original bytes; and valid events sent after the garbage still go
through the whole pipeline (scores, allocatable, a placement, the node
agent's CPU assignment). Scoring does the same over Kafka."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
from collections import Counter

import orjson

from builders import pod, figures_in
from conftest import make_bus, patience, start_service, stop_service, wait_until
from test_props_schemas import paths, replaced, wire
from tidal_bus import StartAt
from tidal_bus.intake import accept
from tidal_oversell.service import OversellService
from tidal_oversell.settings import OversellSettings
from tidal_placement.service import FOLLOWED, PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_remediation.service import RemediationService
from tidal_remediation.settings import RemediationSettings
from tidal_schemas import NodeMetrics, SchemaError, event_types
from tidal_schemas.streams import STREAMS
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

SEED = 20260110
AGENT_NODE = "agent-node"


def garbage(stream: str, rng: random.Random) -> list[bytes]:
    """Bad messages for `stream`: random bytes of several sizes, JSON that is
    not an event, events with a field broken, one nested too deep, one with
    a 70-bit number, and a valid event of another stream's type."""
    sample = wire(stream)
    other = rng.choice(sorted(set(event_types()) - {stream}))
    broken = []
    while len(broken) < 3:  # a field broken so that the event is refused (some changes leave it valid)
        path = rng.choice(paths(sample)[1:])
        data = orjson.dumps(replaced(sample, path, rng.choice([None, "x", -1, [], {"a": 1}, 1.5, True])))
        with contextlib.suppress(SchemaError):
            accept(data, stream)
            continue
        broken.append(data)
    without_payload = {k: v for k, v in sample.items() if k != "payload"}
    return [
        *(rng.randbytes(n) for n in (0, 1, 7, 64, 1000)),
        b"[1, 2, 3]", b'"just a string"', b"null", b"{", b'{"type": "no.such.event"}',
        *broken,
        orjson.dumps(without_payload),
        orjson.dumps(sample).replace(b'"payload":', b'"payload":' + b"[" * 3000 + b"1" + b"]" * 3000 + b',"x":', 1),
        orjson.dumps(replaced(sample, ("version",), "@")).replace(b'"@"', str(2**70).encode()),
        orjson.dumps(wire(other)),  # decodes, but belongs on another stream
    ]


async def _follow(bus, name: str, into: list) -> None:
    """Collect the stream's events (the garbage published to it is skipped)."""
    async for _, event in bus.read(name, StartAt.earliest(), follow=True):
        if not isinstance(event, SchemaError):
            into.append(event)


def _handled(service, stream: str) -> float:
    return service.metrics.registry.get_sample_value(
        "tidal_handler_seconds_count", {"service": service.name, "stream": stream}) or 0.0


def _expected_letters(services, sent: dict[str, list[bytes]]) -> Counter:
    """(stream, group, original bytes) -> how many dead letters: one per
    consumer group reading the stream."""
    expected = Counter()
    for service in services:
        for consumer in service.consumers:
            for data in sent.get(consumer.spec.name, []):
                expected[(consumer.spec.name, consumer.group, data)] += 1
    return expected


async def _wait_for_letters(letters: list, expected: Counter, timeout: float = 60) -> None:
    try:
        await wait_until(lambda: len(letters) >= sum(expected.values()), timeout=timeout, what="every dead letter")
    except AssertionError:
        got = Counter((l.payload.stream, l.payload.consumer) for l in letters)
        want = Counter()
        for (name, group, _), n in expected.items():
            want[(name, group)] += n
        raise AssertionError(f"dead letters by (stream, group): missing {dict(want - got)}, extra {dict(got - want)}")


def _check_letters(letters, expected: Counter) -> None:
    got = Counter((l.stream, l.consumer, base64.b64decode(l.original_b64)) for l in letters)
    assert got == expected
    for letter in letters:
        data = base64.b64decode(letter.original_b64)
        assert letter.reason and letter.original_size == len(data) and not letter.retriable
    reasons = {l.reason.split(":")[0] for l in letters}
    assert {"undecodable", "wrong stream"} <= reasons, reasons


async def test_garbage_on_every_stream_the_services_read(nats_server, namespace, tmp_path):
    url = nats_server.url
    common = dict(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1")
    services = [
        ScoringService(ScoringSettings(**common, period_s=0.2, settle_time="4s", peak_min_samples=3)),
        PlacementService(PlacementSettings(**common, gpu_strategy="best-fit", bind_timeout_s=patience(30),
                                           takeover_settle_s=1.5)),
        OversellService(OversellSettings(**common, eviction_cooldown_s=0, taint="dry-run")),  # evict: dry-run
        RemediationService(RemediationSettings(**common)),  # freeze, migrate: dry-run
        TopologyService(TopologySettings(**common, node_name=AGENT_NODE, numa_override="0:0,1:1", interval_s=0.3,
                                         state_file=str(tmp_path / "cpu-state.json"), cgroup_parent="tidal-none")),
    ]
    tasks = [await start_service(s) for s in services]
    rng = random.Random(SEED)
    letters, scores, allocatable, decisions, assignments = [], [], [], [], []
    async with make_bus(url, namespace, source="garbage") as bus:
        followers = [asyncio.create_task(_follow(bus, name, into)) for name, into in (
            ("dead.letter", letters), ("score.node", scores), ("node.allocatable", allocatable),
            ("placement.decision", decisions), ("cpu.assignment", assignments))]
        # every stream a service reads, through a group or by following it
        read = {c.spec.name for s in services for c in s.consumers} | set(FOLLOWED) | {"cpu.assignment",
                                                                                      "action.result"}
        assert read <= set(STREAMS)
        sent: dict[str, list[bytes]] = {}
        for name in sorted(read):
            sent[name] = garbage(name, rng)
            for i, data in enumerate(sent[name]):
                await bus.publish_raw(name, f"garbage-{i}", data)
        expected = _expected_letters(services, sent)
        await _wait_for_letters(letters, expected)

        # the pipeline still works: fresh metrics are scored and oversold, a pod is placed and given its CPU
        handled_before = {s.name: _handled(s, "node.metrics") for s in services
                          if s.name in ("oversell", "remediation")}
        scores_before, allocatable_before = len(scores), len(allocatable)
        await bus.publish(pod("after-garbage", cpu_milli=1000, exclusive_cpus=True))
        await wait_until(lambda: any(d.name == "after-garbage" and d.outcome == "placed"
                                     for e in decisions for d in e.payload.items), timeout=30, what="the pod placed")
        await wait_until(lambda: any(e.payload.pod == "default/after-garbage" for e in assignments), timeout=20,
                         what="its exclusive CPU")
        await wait_until(lambda: len(scores) > scores_before and len(allocatable) > allocatable_before,
                         timeout=20, what="new node scores and allocatable")
        await wait_until(lambda: all(_handled(s, "node.metrics") > handled_before[s.name]
                                     for s in services if s.name in handled_before), what="metrics handled")
        for service, task in zip(services, tasks):
            assert not task.done() and service.ready() == (True, "ok"), service.name
        await asyncio.sleep(0.5)  # nothing more trickles in: each bad message was dead-lettered once per group
        _check_letters([e.payload for e in letters], expected)
        for follower in followers:
            follower.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
    for service, task in zip(services, tasks):
        await stop_service(service, task)
    placed = next(d for e in decisions for d in e.payload.items if d.name == "after-garbage" and d.outcome == "placed")
    assert placed.node == AGENT_NODE and sum(placed.numa_cpus.values()) == 1


async def test_garbage_on_kafka_for_scoring(kafka_server, namespace):
    url = kafka_server.url
    settings = ScoringSettings(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1",
                               period_s=0.2, settle_time="4s", peak_min_samples=3)
    service_bus = make_bus(url, namespace, source="scoring")
    await service_bus.backend.connect()
    service = ScoringService(settings, bus=service_bus)
    task = await start_service(service, timeout=60)
    rng = random.Random(SEED + 1)
    letters, scores = [], []
    async with make_bus(url, namespace, source="garbage") as bus:
        followers = [asyncio.create_task(_follow(bus, "dead.letter", letters)),
                     asyncio.create_task(_follow(bus, "score.node", scores))]
        sent = {c.spec.name: garbage(c.spec.name, rng) for c in service.consumers}
        assert set(sent) == {"node.metrics", "score.user"}
        for name, messages in sent.items():
            for i, data in enumerate(messages):
                await bus.publish_raw(name, f"garbage-{i}", data)
        expected = _expected_letters([service], sent)
        await _wait_for_letters(letters, expected)
        metrics = NodeMetrics(**{**wire("node.metrics")["payload"], "node": "kafka-node"})
        await bus.publish(metrics)
        await wait_until(lambda: any(s.node == "kafka-node" for s in figures_in(scores)), timeout=30,
                         what="the node scored")
        assert not task.done() and service.ready() == (True, "ok")
        await asyncio.sleep(0.5)
        _check_letters([e.payload for e in letters], expected)
        for follower in followers:
            follower.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
    await stop_service(service, task)
    await service_bus.backend.close()
