"""A stream's side lane (`StreamSpec.side_lane`): pending pods travel in
pod.lifecycle's, and readers of the main lane (fair share, oversell, the
node agents) are not sent them at all, while placement and every other
reader read the whole stream in order. An event of the main lane sent in
the side lane, where those readers would never see it, is refused. Over a
real NATS server and a real Kafka-protocol broker."""

from __future__ import annotations

import asyncio

import pytest

from builders import pod
from conftest import make_bus, patience, wait_until
from tidal_bus import StartAt
from nats.js.api import AckPolicy, ConsumerConfig
from tidal_bus.subjects import nats_consumer_name, nats_partition_filter, nats_stream_name
from tidal_schemas import encode, make_envelope
from tidal_schemas.errors import IdentityError
from tidal_schemas.streams import StreamSpec, lane_of, stream

PODS = stream("pod.lifecycle")


def lifecycle(name: str):
    """One pod's events in order: pending, bound, running, deleted."""
    return [pod(name), pod(name, phase="bound", node="n1"), pod(name, phase="running", node="n1"),
            pod(name, phase="deleted", node="n1")]


def seen(events) -> list[tuple[str, str]]:
    """(pod, phase) of each event, by pod (a broker orders only within a key's partition)."""
    return sorted(((e.payload.name, e.payload.phase) for e in events), key=lambda seen: seen[0])


def test_pending_pods_are_the_side_lane_of_pod_lifecycle_and_nothing_else_is():
    assert PODS.side_lane == "pending"
    assert [lane_of(p) for p in lifecycle("a")] == ["pending", None, None, None]
    with pytest.raises(ValueError, match="state stream"):
        StreamSpec("x.y", keep_last_per_key=True, side_lane="z")


def test_the_main_lane_filter_leaves_the_sixth_token_out():
    assert nats_partition_filter("t", PODS, None) == "t.pod_lifecycle.>"
    assert nats_partition_filter("t", PODS, None, main_lane_only=True) == "t.pod_lifecycle.*.*.*"
    assert nats_partition_filter("t", PODS, 3) == "t.pod_lifecycle.*.3.>"
    assert nats_partition_filter("t", stream("node.metrics"), 3) == "t.node_metrics.*.3.*"


async def test_a_main_lane_reader_gets_every_event_but_the_pending_ones_in_order(bus_url, namespace):
    async with make_bus(bus_url, namespace, source="bridge") as bus:
        for name in ("a", "b"):
            for payload in lifecycle(name):
                await bus.publish(payload)
        whole = [e async for _, e in bus.read("pod.lifecycle", StartAt.earliest())]
        main = [(raw.lane, e) async for raw, e in bus.read("pod.lifecycle", StartAt.earliest(), main_lane_only=True)]
    assert seen(whole) == [(n, p) for n in "ab" for p in ("pending", "bound", "running", "deleted")]
    assert seen(e for _, e in main) == [(n, p) for n in "ab" for p in ("bound", "running", "deleted")]
    assert {lane for lane, _ in main} == {None}


async def test_following_the_main_lane_pending_pods_published_meanwhile_never_arrive(bus_url, namespace):
    got, caught_up = [], asyncio.Event()

    async def on_event(envelope) -> None:
        got.append(envelope)

    async def on_caught_up() -> None:
        caught_up.set()
    async with make_bus(bus_url, namespace, source="bridge") as bus, make_bus(bus_url, namespace) as reader:
        await bus.publish(pod("old"))
        await bus.publish(pod("old", phase="bound", node="n1"))
        task = asyncio.create_task(reader.catch_up_then_follow("pod.lifecycle", on_event, on_caught_up,
                                                               main_lane_only=True))
        await asyncio.wait_for(caught_up.wait(), patience(30))
        for payload in lifecycle("new"):
            await bus.publish(payload)
        await wait_until(lambda: len(got) == 4, timeout=30, what="the bound, running and deleted events")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seen(got) == [("new", "bound"), ("new", "running"), ("new", "deleted"), ("old", "bound")]


async def through_group_g(bus) -> list:
    """A pod's four events published, then read by a member of group "g"."""
    got = []

    async def handler(envelope, delivery) -> None:
        got.append(envelope)
    for payload in lifecycle("a"):
        await bus.publish(payload)
    consumer = bus.consumer("pod.lifecycle", "g", handler)
    task = asyncio.create_task(consumer.run())
    await wait_until(lambda: len(got) == 4, timeout=30, what="the pod's four events, its pending one included")
    consumer.stop()
    await asyncio.wait_for(task, patience(30))
    return got


async def test_a_group_member_gets_both_lanes(bus_url, namespace):
    async with make_bus(bus_url, namespace, source="bridge") as bus:
        got = await through_group_g(bus)
    assert seen(got) == [("a", "pending"), ("a", "bound"), ("a", "running"), ("a", "deleted")]


async def test_a_bound_pod_sent_in_the_side_lane_is_refused_and_a_pending_one_in_the_main_lane_is_not(
        bus_url, namespace):
    async with make_bus(bus_url, namespace, source="bridge") as bus:
        hidden = make_envelope(pod("x", phase="bound", node="n1"), cluster="c1", source="forger")
        await bus.backend.publish(PODS, "c1", hidden.key, encode(hidden), hidden.id, lane="pending")
        plain = make_envelope(pod("y"), cluster="c1", source="before-lanes")
        await bus.backend.publish(PODS, "c1", plain.key, encode(plain), plain.id)
        whole = [e async for _, e in bus.read("pod.lifecycle", StartAt.earliest())]
        main = [e async for _, e in bus.read("pod.lifecycle", StartAt.earliest(), main_lane_only=True)]
    refused = [e for e in whole if isinstance(e, IdentityError)]
    assert len(refused) == 1 and "'pending' lane" in str(refused[0])
    assert [e for e in whole if e not in refused] == [plain]
    assert main == [plain]  # harmless there: a reader of the main lane ignores a pending pod
    assert bus.refused["pod.lifecycle"] == 1


async def test_a_group_durable_made_before_the_lane_is_given_the_filter_that_includes_it(nats_server, namespace):
    """A group's durables made by a Tidal before pod.lifecycle had a side
    lane filter `….*.{p}.*`, which leaves it out: the member updates them."""
    async with make_bus(nats_server.url, namespace, source="bridge") as bus:
        await bus.ensure_streams(["pod.lifecycle"])
        name = nats_stream_name(namespace, PODS)
        for p in range(PODS.partitions):
            old = ConsumerConfig(name=nats_consumer_name("g", PODS, p), durable_name=nats_consumer_name("g", PODS, p),
                                 ack_policy=AckPolicy.EXPLICIT, filter_subject=f"{namespace}.{PODS.token}.*.{p}.*")
            await bus.backend.js.add_consumer(name, config=old)
        got = await through_group_g(bus)
        filters = {(await bus.backend.js.consumer_info(name, nats_consumer_name("g", PODS, p))).config.filter_subject
                   for p in range(PODS.partitions)}
    assert seen(got) == [("a", "pending"), ("a", "bound"), ("a", "running"), ("a", "deleted")]
    assert filters == {nats_partition_filter(namespace, PODS, p) for p in range(PODS.partitions)}
