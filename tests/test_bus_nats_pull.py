"""Pulling from a JetStream consumer over the pull protocol (`nats_pull`),
against a real NATS server: every message once and in order, later messages
without a new fetch's request, a timeout when there is nothing, no busy loop
on a consumer that is gone, unread messages handed back at close, and a
lingering fetch that the server answers with what it stored meanwhile; a
reader's fetches are larger than a group member's; a consumer the server
failed to create (its store) is tried again, and is an error once the tries
are spent; a delivery held and told in progress is not handed out
again, one let go is after one ack wait."""

from __future__ import annotations

import asyncio

import nats
import nats.errors
import nats.js.errors
import orjson
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from builders import pod
from conftest import make_bus, patience, wait_until
from tidal_bus import StartAt
from tidal_bus.nats_delivery import delivery_of
from tidal_bus.nats_pull import Puller


@pytest.fixture
async def jetstream(nats_server, namespace):
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(name=namespace, subjects=[f"{namespace}.>"])
    yield nc, js, namespace
    await js.delete_stream(namespace)
    await nc.close()


async def _publish(js, stream: str, count: int, first: int = 0) -> None:
    for i in range(first, first + count):
        await js.publish(f"{stream}.e", str(i).encode())


async def _fetch_all(puller: Puller, count: int, batch: int) -> list[int]:
    got: list[int] = []
    while len(got) < count:
        got += [int(m.data) for m in await puller.fetch(batch, timeout=2.0)]
    return got


async def test_every_message_once_and_in_order_across_batches(jetstream):
    nc, js, stream = jetstream
    await _publish(js, stream, 700)
    puller = await Puller.open(nc, js, stream, ConsumerConfig(ack_policy=AckPolicy.NONE))
    try:
        assert await _fetch_all(puller, 700, batch=256) == list(range(700))
        with pytest.raises(nats.errors.TimeoutError):
            await puller.fetch(256, timeout=0.3)
        await _publish(js, stream, 5, first=700)  # after an empty fetch: the next one brings them
        assert await _fetch_all(puller, 5, batch=256) == list(range(700, 705))
        assert puller.held == {}  # no acks are awaited: nothing is kept per delivery
    finally:
        await puller.close()


@pytest.mark.parametrize("linger", [0.0, 0.05])
async def test_a_batch_is_never_larger_than_asked(jetstream, linger):
    nc, js, stream = jetstream
    await _publish(js, stream, 30)
    puller = await Puller.open(nc, js, stream, ConsumerConfig(ack_policy=AckPolicy.NONE))
    try:
        sizes = []
        got: list[int] = []
        while len(got) < 30:
            batch = await puller.fetch(8, timeout=2.0, linger=linger)
            sizes.append(len(batch))
            got += [int(m.data) for m in batch]
        assert got == list(range(30)) and max(sizes) <= 8
        if linger:  # the first, then the rest of the batch from what is stored
            assert sizes == [8, 8, 8, 6]
    finally:
        await puller.close()


async def test_a_consumer_that_is_gone_costs_a_request_per_fetch_not_a_busy_loop(jetstream):
    nc, js, stream = jetstream
    requests: dict[str, int] = {"gone": 0, "deleted": 0}
    publish = nc.publish

    async def counted(subject: str, payload: bytes = b"", **options) -> None:
        # pull requests counted as the client sends them (a subscriber to
        # MSG.NEXT would answer for the consumer: no 503 then)
        if ".CONSUMER.MSG.NEXT." in subject:
            requests[subject.rsplit(".", 1)[-1]] += 1
        await publish(subject, payload, **options)
    nc.publish = counted
    gone = await Puller.open(nc, js, stream, ConsumerConfig(durable_name="gone", ack_policy=AckPolicy.EXPLICIT))
    deleted = await Puller.open(nc, js, stream, ConsumerConfig(durable_name="deleted",
                                                               ack_policy=AckPolicy.EXPLICIT))
    try:
        # gone before the pull: the server's error (503, no consumer answers), once per fetch
        await js.delete_consumer(stream, "gone")
        for _ in range(3):
            with pytest.raises(nats.js.errors.ServiceUnavailableError):
                await gone.fetch(16, timeout=0.5)
        # deleted while a request waits (409): that fetch waits out its timeout without asking again
        waiting = asyncio.create_task(deleted.fetch(16, timeout=1.0))
        await asyncio.sleep(0.2)
        await js.delete_consumer(stream, "deleted")
        with pytest.raises(nats.errors.TimeoutError):
            await waiting
        await asyncio.sleep(0.1)
        assert requests == {"gone": 3, "deleted": 1}
    finally:
        await gone.close()
        await deleted.close()


async def test_close_hands_unread_messages_back_at_once(jetstream):
    nc, js, stream = jetstream
    config = ConsumerConfig(durable_name="group", ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0)
    await _publish(js, stream, 1)
    first = await Puller.open(nc, js, stream, config)
    (msg,) = await first.fetch(16, timeout=2.0)  # its request stays open: later messages come to it
    await msg.ack()
    await _publish(js, stream, 2, first=1)
    await wait_until(lambda: len(first._arrived) == 2, 5, "two deliveries to the open request")
    await first.close(return_unread=True)
    second = await Puller.open(nc, js, stream, ConsumerConfig(durable_name="group", ack_policy=AckPolicy.EXPLICIT,
                                                              ack_wait=30.0))
    try:  # well within ack_wait: they were handed back, not left to time out
        assert sorted(await _fetch_all(second, 2, batch=16)) == [1, 2]
    finally:
        await second.close()


async def test_lingering_the_server_holds_a_trickle_and_sends_it_as_one_batch(jetstream):
    nc, js, stream = jetstream
    requests: list[dict] = []
    publish = nc.publish

    async def counted(subject: str, payload: bytes = b"", **options) -> None:
        if ".CONSUMER.MSG.NEXT." in subject:
            requests.append(orjson.loads(payload))
        await publish(subject, payload, **options)
    nc.publish = counted
    # no request open for a linger longer than an ephemeral consumer's default inactivity limit (5 s)
    puller = await Puller.open(nc, js, stream, ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=60.0))
    try:
        await _publish(js, stream, 1)
        fetching = asyncio.create_task(puller.fetch(64, timeout=5.0, linger=8.0))
        await wait_until(lambda: len(puller._arrived) == 1, 5, "the first message")
        for i in range(1, 6):  # a trickle during the linger: stored, not delivered
            await _publish(js, stream, 1, first=i)
            await asyncio.sleep(0.05)
        assert len(puller._arrived) == 1 and not fetching.done()
        got = [int(m.data) for m in await fetching]
        # one request for the first message, one for the rest (no_wait: answered from what is stored)
        assert [r["batch"] for r in requests[:2]] == [1, 63] and requests[1].get("no_wait") is True
        # all of them (in one batch unless the answer took over GRACE_S: then the next fetch has the rest)
        assert got + await _fetch_all(puller, 6 - len(got), batch=64) == list(range(6))
    finally:
        await puller.close()


async def test_lingering_does_not_slow_a_backlog(jetstream):
    nc, js, stream = jetstream
    await _publish(js, stream, 200)
    puller = await Puller.open(nc, js, stream, ConsumerConfig(ack_policy=AckPolicy.NONE))
    try:  # more stored than a batch: no linger (30 s) before each batch
        got = []
        for _ in range(3):
            got += [int(m.data) for m in await asyncio.wait_for(puller.fetch(64, timeout=5.0, linger=30.0), 20.0)]
        assert got == list(range(192))
    finally:
        await puller.close()


async def test_a_fetch_cancelled_while_lingering_leaves_its_messages_to_be_handed_back(jetstream):
    nc, js, stream = jetstream
    config = dict(durable_name="group", ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0)
    await _publish(js, stream, 1)
    first = await Puller.open(nc, js, stream, ConsumerConfig(**config))
    fetching = asyncio.create_task(first.fetch(16, timeout=5.0, linger=10.0))
    await wait_until(lambda: len(first._arrived) == 1, 5, "the first message")
    fetching.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fetching
    await first.close(return_unread=True)
    second = await Puller.open(nc, js, stream, ConsumerConfig(**config))
    try:  # well within ack_wait: handed back at close, not left to time out
        assert await _fetch_all(second, 1, batch=16) == [0]
    finally:
        await second.close()


async def test_a_reader_takes_a_backlog_read_batch_at_a_time(nats_server, namespace):
    """A stream followed without a group is read 256 messages a fetch, not
    the 64 of a group member: a follower must read faster than its service
    works (placement's pending pods, between its decisions' events)."""
    async with make_bus(nats_server.url, namespace, source="test") as bus:
        await asyncio.gather(*(bus.publish(pod(f"p{i}")) for i in range(300)))
        requests: list[int] = []
        nc = bus.backend._nc
        publish = nc.publish

        async def counted(subject: str, payload: bytes = b"", **options) -> None:
            if ".CONSUMER.MSG.NEXT." in subject:
                requests.append(orjson.loads(payload)["batch"])
            await publish(subject, payload, **options)
        nc.publish = counted
        read = [e.payload.name async for _, e in bus.read("pod.lifecycle", StartAt.earliest())]
    assert sorted(read) == sorted(f"p{i}" for i in range(300))
    assert bus.backend.read_batch == 256 and requests and max(requests) == 256


@pytest.fixture
async def own_jetstream(own_nats):
    """A stream on a server of the test's own, and where its consumers' stores go."""
    nc = await nats.connect(own_nats.url)
    js = nc.jetstream()
    await js.add_stream(name="held", subjects=["held.>"])
    yield nc, js, own_nats.data_dir / "jetstream" / "jetstream" / "$G" / "streams" / "held" / "obs"
    await nc.close()


async def test_a_consumer_the_server_failed_to_create_is_created_when_tried_again(own_jetstream, caplog):
    nc, js, stores = own_jetstream
    stores.mkdir(parents=True, exist_ok=True)
    (stores / "d1").write_text("")  # a file where the consumer's store directory goes: the server answers 500
    opening = asyncio.create_task(Puller.open(nc, js, "held", ConsumerConfig(durable_name="d1")))
    await wait_until(lambda: "not created" in caplog.text, timeout=10)
    assert not opening.done()
    (stores / "d1").unlink()
    puller = await asyncio.wait_for(opening, patience(10))
    assert (await js.consumer_info("held", "d1")).name == puller.consumer == "d1"
    await puller.close()


async def test_a_consumer_the_server_keeps_failing_to_create_is_an_error_once_the_tries_are_spent(own_jetstream):
    nc, js, stores = own_jetstream
    stores.mkdir(parents=True, exist_ok=True)
    (stores / "d2").write_text("")
    with pytest.raises(nats.js.errors.ServerError, match="error creating store for consumer"):
        await Puller.open(nc, js, "held", ConsumerConfig(durable_name="d2"))


async def test_a_held_delivery_kept_alive_is_not_handed_out_again_and_one_let_go_is_after_one_ack_wait(jetstream):
    # ack wait 2 s, told in progress every 0.2 s for 5 s: no second delivery; then left alone (as a
    # delivery lost in flight is), it comes again after one ack wait, not the old 30 s.
    nc, js, stream = jetstream
    await _publish(js, stream, 1)
    config = ConsumerConfig(durable_name="kept", ack_policy=AckPolicy.EXPLICIT, ack_wait=2.0)
    puller = await Puller.open(nc, js, stream, config)
    try:
        (first,) = await puller.fetch(1, timeout=patience(5))
        assert list(puller.held) == [first.reply]
        told = 0
        for _ in range(25):
            await asyncio.sleep(0.2)
            told += await puller.keep_alive(0.2)
        assert told >= 10
        info = await js.consumer_info(stream, "kept")
        assert (info.num_redelivered, info.num_ack_pending) == (0, 1)
        (again,) = await puller.fetch(1, timeout=patience(10))
        assert (int(again.data), delivery_of(again).deliveries) == (0, 2)
        await again.ack()
        puller.settled(again.reply)
        puller.settled(first.reply)
        assert puller.held == {}
    finally:
        await puller.close()


async def test_a_durable_of_an_older_ack_wait_gets_the_one_it_is_opened_with(jetstream):
    nc, js, stream = jetstream
    await js.add_consumer(stream, ConsumerConfig(durable_name="old", ack_policy=AckPolicy.EXPLICIT, ack_wait=30.0))
    puller = await Puller.open(nc, js, stream, ConsumerConfig(durable_name="old", ack_policy=AckPolicy.EXPLICIT,
                                                              ack_wait=5.0))
    try:
        assert (await js.consumer_info(stream, "old")).config.ack_wait == 5.0
    finally:
        await puller.close()


async def test_a_follower_that_loses_a_delivery_in_flight_reads_it_again_and_nothing_twice(
        nats_server, namespace, monkeypatch, caplog):
    # An unacknowledged reader is never sent a lost message again: the gap in the consumer's numbering
    # of its deliveries (the 100th never arrives) makes a new reader resume after the 99th.
    async with make_bus(nats_server.url, namespace, source="test") as bus:
        await asyncio.gather(*(bus.publish(pod(f"p{i}")) for i in range(300)))
        arrive, data_seen = Puller._arrive, [0]

        async def losing_the_100th(self, msg):
            if msg.data:
                data_seen[0] += 1
                if data_seen[0] == 100:
                    return  # as if the connection had died with it
            await arrive(self, msg)
        monkeypatch.setattr(Puller, "_arrive", losing_the_100th)
        read: list[str] = []

        async def follow() -> None:
            async for _, event in bus.read("pod.lifecycle", StartAt.earliest(), follow=True):
                read.append(event.payload.name)
                if len(read) == 300:
                    return
        await asyncio.wait_for(follow(), patience(20))
    assert sorted(read) == sorted(f"p{i}" for i in range(300))  # each once: none lost, none twice
    assert "were lost in flight" in caplog.text
