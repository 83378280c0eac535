"""Consumer-group membership for NATS, where the broker has none.

Each member heartbeats a key in a JetStream key-value bucket (the value is
the time of the beat); every member keeps one watcher on the group's keys,
counts as live the members that beat within `ttl`, and computes the same
assignment with rendezvous hashing, so no coordinator is needed and a dead
member's partitions move to the others within one `ttl`. (Listing the keys
on every beat would create a consumer per call and exhaust the server's
consumer limit on a busy stack; one watcher per member does not.)

Why not the server's priority groups (ADR-42, `priority_policy:
pinned_client`, nats-server 2.11+): a pin is per consumer and goes to the
first client that pulls; the server never moves it while that client keeps
pulling, so with one consumer per partition one member ends up holding every
partition. bench/nats_priority_groups.py (8 partitions, 2 and 3 members, two
runs on a 2-core shared machine): with pinned groups one member held all 8
partitions in every run (8/0, 8/0/0), whether the members started one after
another or together; this layer gave 4/4 and 3/3/2. Failover is what the
server does do: a killed member's partitions moved in 0.5-1.0 s at a pinned
TTL of 1 s and 2.4-3.0 s at 3 s (this layer: 0.9-1.6 s and 3.3-3.7 s at a
member TTL of 1 and 3 s), nothing unacked, no message handled by two
members at once. Balance is the job, so the layer stays;
tests/test_nats_priority_groups.py fails if a server ever stops pinning to
the first puller. docs/production-bus.md has the figures.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
import nats.errors
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from tidal_clock import Clock, wall_clock

from .nats_streams import electing

log = logging.getLogger(__name__)


def raise_if_cancelling() -> None:
    """Python 3.11's wait_for (used inside nats-py) can swallow a cancel that
    races a reply; a loop that must stop checks for a pending cancel itself."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_until_done(tasks: list[asyncio.Task], every_s: float = 1.0) -> None:
    """Wait for cancelled tasks to end, cancelling again those still running
    every `every_s`: Python 3.11's wait_for (inside nats-py and aiokafka)
    swallows a cancel that races a reply, and the loop then runs on."""
    while running := [t for t in tasks if not t.done()]:
        await asyncio.wait(running, timeout=every_s)
        for task in running:
            if not task.done():
                task.cancel()


def partition_owners(partitions: Iterable[int], members: Iterable[str]) -> dict[int, str]:
    """Rendezvous hashing with bounded load: every (partition, member) pair
    is ranked by hash; partitions go to their best-ranked member with room,
    first up to floor(partitions / members) each, then the rest up to one
    more. Every member computes the same answer from the same set; each
    holds its share ±1, so none sits idle while another holds half the
    stream (plain rendezvous over 8 partitions left one of 4 replicas empty
    in 3 runs of 8); a member that leaves moves mostly its own partitions."""
    partitions, members = sorted(set(partitions)), sorted(set(members))
    if not members:
        return {}
    ranked = sorted(((hashlib.blake2b(f"{m}/{p}".encode(), digest_size=8).digest(), p, m)
                     for p in partitions for m in members), reverse=True)
    owners: dict[int, str] = {}
    load = dict.fromkeys(members, 0)
    share = len(partitions) // len(members)
    for cap in (share, share + 1):
        for _, partition, member in ranked:
            if partition not in owners and load[member] < cap:
                owners[partition] = member
                load[member] += 1
    return owners


def assignment(member: str, members: list[str], partitions: int) -> frozenset[int]:
    """Partitions `member` owns among the live `members`."""
    if member not in members:
        return frozenset()
    return frozenset(p for p, owner in partition_owners(range(partitions), members).items() if owner == member)


class Membership:
    """One member's view of a group: heartbeats, and calls `on_change` with
    the new owned set whenever it changes."""

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        group_key: str,
        partitions: int,
        on_change: Callable[[frozenset[int]], Awaitable[None]],
        ttl: float = 6.0,
        member_id: str | None = None,
        clock: Clock = wall_clock,
        replicas: int = 1,
        refused: Callable[[], Exception | None] = lambda: None,
    ) -> None:
        # One id per process (not per subscription) so that a process owns the
        # same partitions of every stream it reads.
        self.member_id = member_id or uuid.uuid4().hex[:12]
        self._js = js
        self._bucket_name = bucket
        self._replicas = replicas  # copies of the bucket: as many as the streams have
        self._refused = refused  # a refusal the server noted for the bucket: no use retrying
        self._prefix = group_key
        self._partitions = partitions
        self._on_change = on_change
        self._ttl = ttl
        self.clock = clock  # wall seconds: a beat's value is compared with other members' clocks
        self._owned: frozenset[int] = frozenset()
        self._kv: KeyValue | None = None
        self._watcher = None
        self._beats: dict[str, float] = {}  # member -> time of its last beat
        self._own_seen = 0.0  # when the watcher last showed our own beat

    @property
    def owned(self) -> frozenset[int]:
        return self._owned

    async def join(self) -> None:
        self._kv = await self._bucket()
        self._watcher = await electing(lambda: self._kv.watch(f"{self._prefix}.*"), f"watch of {self._prefix}",
                                       refused=self._refused)
        await electing(self._beat, f"first heartbeat in {self._prefix}", refused=self._refused)
        await self._read_updates(first=True)
        self._own_seen = self.clock()
        await self.refresh()

    async def run(self) -> None:
        """Heartbeat and rebalance until cancelled."""
        while True:
            await asyncio.sleep(self._ttl / 3)
            raise_if_cancelling()
            try:
                await self._beat()
                await self.refresh()
                if self.clock() - self._own_seen > self._ttl:
                    await self._rewatch()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # broker away: keep what we own, retry next beat
                log.warning("membership heartbeat failed: %s", exc)

    async def leave(self) -> None:
        if self._watcher is not None:
            try:
                await self._watcher.stop()
            except Exception as exc:
                log.info("could not stop the membership watcher: %s", exc)
        if self._kv is not None:
            try:
                await self._kv.delete(self._member_key)
            except Exception as exc:
                log.info("could not remove member key on leave: %s", exc)

    async def refresh(self) -> None:
        members = await self._live_members()
        owned = assignment(self.member_id, members, self._partitions)
        if owned != self._owned:
            self._owned = owned
            await self._on_change(owned)

    async def _rewatch(self) -> None:
        # Our own beats no longer come back: the watcher died with the server
        # (a restart drops its consumer, and the client does not make a new
        # one). Without a new one every member would soon see only itself
        # and take every partition.
        log.info("membership of %s: the watcher shows no beats; watching again", self._prefix)
        if self._watcher is not None:
            try:
                await self._watcher.stop()
            except Exception as exc:
                log.info("could not stop the old membership watcher: %s", exc)
        assert self._kv is not None
        self._watcher = await self._kv.watch(f"{self._prefix}.*")
        await self._read_updates(first=True)
        self._own_seen = self.clock()

    @property
    def _member_key(self) -> str:
        return f"{self._prefix}.{self.member_id}"

    async def _beat(self) -> None:
        assert self._kv is not None
        await self._kv.put(self._member_key, repr(self.clock()).encode())

    async def _read_updates(self, first: bool = False) -> None:
        """Apply what the watcher has seen: beats, and members that left."""
        assert self._watcher is not None
        while True:
            try:
                entry = await self._watcher.updates(timeout=2.0 if first else 0.01)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                return
            if entry is None:  # the end of what was there when the watch began
                if first:
                    return
                continue
            member = entry.key.rsplit(".", 1)[1]
            if entry.operation in ("DEL", "PURGE"):
                self._beats.pop(member, None)
            else:
                if member == self.member_id:
                    self._own_seen = self.clock()
                try:
                    self._beats[member] = float(entry.value or b"0")
                except ValueError:
                    self._beats[member] = 0.0

    async def _live_members(self) -> list[str]:
        await self._read_updates()
        now = self.clock()
        self._beats[self.member_id] = now  # we are alive: we just beat
        return sorted(m for m, at in self._beats.items() if now - at < self._ttl)

    async def _bucket(self) -> KeyValue:
        what = f"membership bucket {self._bucket_name}"
        try:
            bucket = await electing(lambda: self._js.key_value(self._bucket_name), what)
        except BucketNotFoundError:
            config = KeyValueConfig(bucket=self._bucket_name, ttl=self._ttl, storage=StorageType.FILE,
                                    replicas=self._replicas)
            return await electing(lambda: self._js.create_key_value(config), what)
        stream = f"KV_{self._bucket_name}"
        have = (await electing(lambda: self._js.stream_info(stream), what)).config
        if (have.num_replicas or 1) < self._replicas:  # raised, never lowered
            try:
                await self._js.update_stream(replace(have, num_replicas=self._replicas))
                log.warning("%s: replicas %s -> %d", what, have.num_replicas, self._replicas)
            except (nats.errors.Error, asyncio.TimeoutError) as exc:  # e.g. this user may not: an admin's change
                log.warning("%s has %s replicas, fewer than the streams' %d, and could not be raised (%s)",
                            what, have.num_replicas, self._replicas, exc)
        return bucket

