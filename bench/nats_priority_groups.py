"""Can JetStream's pinned-client priority groups (ADR-42, nats-server 2.11+)
carry a NATS consumer group's partition ownership in Tidal's place?

One durable pull consumer per partition (as nats_group.py makes them), M
members, each a child process. Two kinds of member:

- `pg`: the consumer is `priority_policy: pinned_client` with one priority
  group and `priority_timeout` (the pinned TTL); every member pulls every
  partition's consumer with `{"group": ..., "id": <pin>}` (the pin learnt
  from the `Nats-Pin-Id` header; a 423 clears it), and the server decides
  who is served.
- `tidal`: Tidal's own layer (NatsBackend.subscribe: membership.py's
  heartbeats and bounded-load rendezvous, member TTL = the same figure).

Per run: member 0 starts alone and takes every partition, the other
members join (`--together`: all start at once); after a settling time the partitions each member is being
served on are counted (balance). Then the member with the most partitions
is killed -9 (or SIGSTOPped with `--hang`, continued once its partitions
moved): hand-over is the time from then until another member handles a
message of each of its partitions (max over its partitions). At the end
every published message must have been acked; `twice` counts messages
handled by two members, `at once` those whose handlings overlapped in time.

Run: .venv/bin/python bench/nats_priority_groups.py [--partitions 8] [--members 2 3]
     [--ttl 1 3] [--kinds pg tidal] [--hang] [--ack-wait 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nats


from tidal_bus.api import StartAt  # noqa: E402
from tidal_bus.embedded import EmbeddedNats  # noqa: E402
from tidal_bus.nats_backend import NatsBackend  # noqa: E402
from tidal_schemas.streams import StreamSpec  # noqa: E402

STREAM, GROUP, NAMESPACE = "PGBENCH", "tidal", "pgbench"
SPEC_NAME = "bench.handover"
RATE_HZ = 20  # messages per second per partition
HANDLE_S = 0.005  # time a member spends on one message before its ack
BATCH = 16


def emit(**event) -> None:
    print(json.dumps({"t": time.time(), **event}), flush=True)


# -- members (child processes) --------------------------------------------------
async def pg_partition(nc, partition: int, name: str, expires_s: float) -> None:
    """Pull one partition's consumer as a member of its priority group."""
    arrived: asyncio.Queue = asyncio.Queue()

    async def deliver(msg) -> None:
        arrived.put_nowait(msg)

    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=deliver)
    loop = asyncio.get_running_loop()
    pin: str | None = None
    while True:
        request = {"batch": BATCH, "expires": int(expires_s * 1e9), "group": GROUP}
        if pin:
            request["id"] = pin
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.p{partition}", json.dumps(request).encode(),
                         reply=inbox)
        got, until = 0, loop.time() + expires_s + 1.0
        while got < BATCH:
            try:
                msg = await asyncio.wait_for(arrived.get(), max(0.01, until - loop.time()))
            except asyncio.TimeoutError:
                break
            headers = msg.headers or {}
            status = headers.get("Status")
            if status == "100":
                continue
            if status:  # 408 expired, 423 wrong pin, 409 ...: this request is over
                if status == "423":
                    emit(ev="unpinned", m=name, p=partition)
                    pin = None
                break
            if headers.get("Nats-Pin-Id") and headers["Nats-Pin-Id"] != pin:
                pin = headers["Nats-Pin-Id"]
                emit(ev="pinned", m=name, p=partition, pin=pin)
            got += 1
            emit(ev="got", m=name, p=partition, id=msg.data.decode())
            await asyncio.sleep(HANDLE_S)
            await msg.ack()
            emit(ev="done", m=name, p=partition, id=msg.data.decode())


async def pg_member(url: str, partitions: int, name: str, ttl: float) -> None:
    nc = await nats.connect(url)
    emit(ev="ready", m=name)
    # pulls expire well within the pinned TTL, so a live member re-pulls in time to keep its pin
    expires = max(0.5, min(1.0, ttl / 3))
    await asyncio.gather(*(pg_partition(nc, p, name, expires) for p in range(partitions)))


async def tidal_member(url: str, partitions: int, name: str, ttl: float, ack_wait: float) -> None:
    backend = NatsBackend(url, NAMESPACE, ack_wait_s=ack_wait, member_ttl_s=ttl, fetch_batch=BATCH)
    await backend.connect()
    sub = await backend.subscribe(StreamSpec(SPEC_NAME, partitions=partitions), GROUP, StartAt.earliest())
    emit(ev="ready", m=name)
    async for msg in sub.messages():
        emit(ev="got", m=name, p=msg.partition, id=msg.data.decode())
        await asyncio.sleep(HANDLE_S)
        await msg.ack()
        emit(ev="done", m=name, p=msg.partition, id=msg.data.decode())


# -- the parent ------------------------------------------------------------------
async def create_pg_consumers(nc, partitions: int, ttl: float, ack_wait: float) -> None:
    js = nc.jetstream()
    await js.add_stream(name=STREAM, subjects=[f"{STREAM.lower()}.*"])
    for p in range(partitions):
        config = {"durable_name": f"p{p}", "name": f"p{p}", "ack_policy": "explicit", "deliver_policy": "all",
                  "ack_wait": int(ack_wait * 1e9), "max_ack_pending": 256, "filter_subject": f"{STREAM.lower()}.{p}",
                  "priority_groups": [GROUP], "priority_policy": "pinned_client",
                  "priority_timeout": int(ttl * 1e9)}
        answer = json.loads((await nc.request(f"$JS.API.CONSUMER.CREATE.{STREAM}.p{p}", json.dumps(
            {"stream_name": STREAM, "config": config, "action": "create"}).encode(), timeout=5)).data)
        if "error" in answer:
            raise SystemExit(f"consumer p{p} refused: {answer['error']}")


@dataclass
class Run:
    kind: str
    members: int
    ttl: float
    events: list[dict] = field(default_factory=list)
    published: set[str] = field(default_factory=set)


def owners_between(events: list[dict], start: float, end: float) -> dict[int, str]:
    """Partition -> the member that handled its last message in [start, end)."""
    owners: dict[int, str] = {}
    for e in events:
        if e["ev"] == "got" and start <= e["t"] < end:
            owners[e["p"]] = e["m"]
    return owners


def handover_s(events: list[dict], lost: set[int], gone: str, since: float) -> float | None:
    """Time from `since` until every partition in `lost` had a message handled by another member."""
    first: dict[int, float] = {}
    for e in events:
        if e["ev"] == "got" and e["p"] in lost and e["m"] != gone and e["t"] >= since:
            first.setdefault(e["p"], e["t"])
    return max(first.values()) - since if len(first) == len(lost) and lost else None


def handled_twice(events: list[dict], killed: str | None, at: float) -> tuple[int, int]:
    """(messages handled by two members or more, those whose handlings
    overlapped in time); a handling the `killed` member never finished ends
    when it was killed, `at`."""
    spans: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for e in events:
        if e["ev"] == "got":
            spans[e["id"]][e["m"]] = [e["t"], at if e["m"] == killed else float("inf")]
        elif e["ev"] == "done" and e["m"] in spans[e["id"]]:
            spans[e["id"]][e["m"]][1] = e["t"]
    twice = at_once = 0
    for by_member in spans.values():
        if len(by_member) > 1:
            twice += 1
            ordered = sorted(by_member.values())
            at_once += any(later[0] < earlier[1] for earlier, later in zip(ordered, ordered[1:]))
    return twice, at_once


async def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def one_run(kind: str, members: int, ttl: float, partitions: int, ack_wait: float, hang: bool,
                  together: bool) -> dict:
    run = Run(kind, members, ttl)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedNats(Path(tmp)) as server:
        nc = await nats.connect(server.url)
        publisher = None
        if kind == "pg":
            await create_pg_consumers(nc, partitions, ttl, ack_wait)
        else:
            publisher = NatsBackend(server.url, NAMESPACE)
            await publisher.connect()
            await publisher.ensure_stream(StreamSpec(SPEC_NAME, partitions=partitions))
        js = nc.jetstream()
        spec = StreamSpec(SPEC_NAME, partitions=partitions)

        async def publish() -> None:
            n = 0
            while True:
                ids = [f"{p}-{n}" for p in range(partitions)]
                if kind == "pg":
                    await asyncio.gather(*(js.publish(f"{STREAM.lower()}.{p}", i.encode()) for p, i in enumerate(ids)))
                else:  # keys spread over the partitions by Tidal's own hash
                    await asyncio.gather(*(publisher.publish(spec, "bench", f"k{n % 64}-{p}", i.encode(), i)
                                           for p, i in enumerate(ids)))
                run.published.update(ids)
                n += 1
                await asyncio.sleep(1 / RATE_HZ)

        procs: list[asyncio.subprocess.Process] = []
        readers: list[asyncio.Task] = []

        async def spawn(name: str) -> None:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--member", name, "--kind", kind, "--url", server.url,
                "--partitions", str(partitions), "--ttl", str(ttl), "--ack-wait", str(ack_wait),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
            procs.append(proc)

            async def read() -> None:
                while line := await proc.stdout.readline():
                    run.events.append(json.loads(line))
            readers.append(asyncio.create_task(read()))

        pub = asyncio.create_task(publish())
        try:
            for i in range(members):
                if i == 1 and not together:  # a rolling start: m0 holds every partition before the rest join
                    await wait_for(lambda: len(owners_between(run.events, 0, float("inf"))) == partitions, 15)
                await spawn(f"m{i}")
            await wait_for(lambda: sum(e["ev"] == "ready" for e in run.events) == members, 20)
            await asyncio.sleep(ttl + 1.0)  # time for Tidal's members to see the joiners' beats
            now = time.time()
            owners = owners_between(run.events, now - 1.0, now)
            load = Counter(owners.values())
            balance = [load.get(f"m{i}", 0) for i in range(members)]
            victim = max(range(members), key=lambda i: balance[i])
            lost = {p for p, m in owners.items() if m == f"m{victim}"}
            since = time.time()
            procs[victim].send_signal(signal.SIGSTOP if hang else signal.SIGKILL)
            moved = await wait_for(lambda: handover_s(run.events, lost, f"m{victim}", since) is not None,
                                   ttl + 15.0)
            if hang:  # back after the hand-over: what does it do with what it had in hand?
                await asyncio.sleep(1.0)
                procs[victim].send_signal(signal.SIGCONT)
                await asyncio.sleep(ttl + 1.0)
            pub.cancel()
            await asyncio.gather(pub, return_exceptions=True)
            acked = lambda: {e["id"] for e in run.events if e["ev"] == "done"} >= run.published  # noqa: E731
            await wait_for(acked, ack_wait + 5.0)
        finally:
            pub.cancel()
            for proc in procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                await proc.wait()
            await asyncio.gather(*readers, return_exceptions=True)
            if publisher is not None:
                await publisher.close()
            await nc.close()
    twice, at_once = handled_twice(run.events, None if hang else f"m{victim}", since)
    done = {e["id"] for e in run.events if e["ev"] == "done"}
    return {"kind": kind, "members": members, "ttl_s": ttl, "balance": "/".join(map(str, balance)),
            "handover_s": handover_s(run.events, lost, f"m{victim}", since) if moved else None,
            "published": len(run.published), "unacked": len(run.published - done), "twice": twice,
            "at_once": at_once, "pins_lost": sum(1 for e in run.events if e["ev"] == "unpinned")}


def table(rows: list[dict]) -> str:
    head = ["kind", "members", "ttl_s", "balance", "handover_s", "published", "unacked", "twice", "at_once",
            "pins_lost"]
    cells = [[("-" if r[h] is None else f"{r[h]:.2f}" if isinstance(r[h], float) else str(r[h])) for h in head]
             for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(line, widths)) for line in [head, *cells])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--members", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--ttl", type=float, nargs="+", default=[1.0, 3.0],
                        help="pinned TTL (pg) and member TTL (tidal), seconds")
    parser.add_argument("--kinds", nargs="+", default=["pg", "tidal"], choices=["pg", "tidal"])
    parser.add_argument("--ack-wait", type=float, default=3.0)
    parser.add_argument("--hang", action="store_true", help="SIGSTOP the member instead of kill -9, then continue it")
    parser.add_argument("--together", action="store_true",
                        help="start every member at once (default: m0 first, the others once it holds every partition)")
    parser.add_argument("--member", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.member:  # a child process
        if args.kind == "pg":
            asyncio.run(pg_member(args.url, args.partitions, args.member, args.ttl[0]))
        else:
            asyncio.run(tidal_member(args.url, args.partitions, args.member, args.ttl[0], args.ack_wait))
        return
    rows = []
    started = time.monotonic()
    for kind in args.kinds:
        for ttl in args.ttl:
            for members in args.members:
                rows.append(asyncio.run(one_run(kind, members, ttl, args.partitions, args.ack_wait, args.hang,
                                             args.together)))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows))
    print(f"({args.partitions} partitions, {RATE_HZ} msg/s each, ack_wait {args.ack_wait} s, "
          f"{'SIGSTOP then SIGCONT' if args.hang else 'kill -9'}, "
          f"{'started together' if args.together else 'm0 first'}; {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
