"""What Tidal's decision to keep its own NATS group membership rests on
(membership.py's docstring, docs/production-bus.md): the server takes a
`pinned_client` priority group, pins one consumer to the first client that
pulls, and neither hands the pin to a member that joins later nor serves a
pull carrying a pin id that is not the current one (423). If a server ever
balanced pins across the clients of a group, this test fails and the
decision should be looked at again."""

from __future__ import annotations

import asyncio
import json

import nats

STREAM, GROUP = "PGTEST", "tidal"


async def create_pinned_consumer(nc) -> dict:
    config = {"durable_name": "p0", "name": "p0", "ack_policy": "explicit", "filter_subject": "pgtest.0",
              "priority_groups": [GROUP], "priority_policy": "pinned_client", "priority_timeout": 60 * 10**9}
    answer = await nc.request(f"$JS.API.CONSUMER.CREATE.{STREAM}.p0", json.dumps(
        {"stream_name": STREAM, "config": config, "action": "create"}).encode(), timeout=5)
    return json.loads(answer.data)


async def pull(nc, queue: asyncio.Queue, inbox: str, pin: str | None = None, expires_s: float = 1.0) -> None:
    request = {"batch": 1, "expires": int(expires_s * 1e9), "group": GROUP} | ({"id": pin} if pin else {})
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.p0", json.dumps(request).encode(), reply=inbox)


async def answer_to(queue: asyncio.Queue):
    """The next answer that is not an idle heartbeat (a message or a status)."""
    while True:
        msg = await asyncio.wait_for(queue.get(), timeout=10)
        if (msg.headers or {}).get("Status") != "100":
            return msg


async def client(url: str):
    nc = await nats.connect(url)
    queue: asyncio.Queue = asyncio.Queue()
    inbox = nc.new_inbox()

    async def deliver(msg) -> None:
        queue.put_nowait(msg)

    await nc.subscribe(inbox, cb=deliver)
    return nc, queue, inbox


async def test_the_pin_stays_with_the_first_puller_and_a_wrong_pin_is_refused(own_nats):
    first, first_q, first_inbox = await client(own_nats.url)
    late, late_q, late_inbox = await client(own_nats.url)
    try:
        js = first.jetstream()
        await js.add_stream(name=STREAM, subjects=["pgtest.*"])
        created = await create_pinned_consumer(first)
        assert "error" not in created, created
        assert created["config"]["priority_policy"] == "pinned_client"
        assert created["config"]["priority_groups"] == [GROUP]

        await pull(first, first_q, first_inbox)
        await js.publish("pgtest.0", b"m0")
        msg = await answer_to(first_q)
        pin = msg.headers["Nats-Pin-Id"]  # the server picked the first puller and says so
        await msg.ack()

        # a member joining later pulls without a pin: while the first keeps pulling with
        # its pin, every message goes to the first and the joiner's pull runs out (408)
        await pull(late, late_q, late_inbox, expires_s=1.0)
        for i in range(1, 4):
            await pull(first, first_q, first_inbox, pin=pin)
            await js.publish("pgtest.0", f"m{i}".encode())
            msg = await answer_to(first_q)
            assert msg.data == f"m{i}".encode()
            await msg.ack()
        assert (await answer_to(late_q)).headers.get("Status") == "408"

        await pull(late, late_q, late_inbox, pin="not-the-pin")
        assert (await answer_to(late_q)).headers.get("Status") == "423"

        info = json.loads((await first.request(f"$JS.API.CONSUMER.INFO.{STREAM}.p0", b"", timeout=5)).data)
        groups = {g.get("group", g.get("name")): g for g in info["priority_groups"]}
        assert groups[GROUP]["pinned_client_id"] == pin
    finally:
        await first.close()
        await late.close()
