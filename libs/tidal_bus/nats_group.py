"""A NATS consumer-group member: one durable pull consumer per partition the
member owns (membership.py splits the partitions between the members), one
fetcher per owned partition feeding one queue."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NotFoundError

from tidal_schemas.streams import StreamSpec

from .api import AssignmentListener, GroupSubscription, RawMessage, StartAt
from .errors import BusError
from .membership import Membership, cancel_until_done, raise_if_cancelling
from .nats_pull import Puller
from .nats_delivery import raw_message
from .nats_streams import deliver_options
from .subjects import encode_durable, nats_consumer_name, nats_partition_filter, nats_stream_name

if TYPE_CHECKING:
    from .nats_backend import NatsBackend

log = logging.getLogger(__name__)
YIELD_EVERY = 64  # messages taken from the buffer before yielding to the event loop


class NatsGroupSubscription(GroupSubscription):
    """Owns one pull fetcher per owned partition, feeding one queue."""

    def __init__(self, backend: "NatsBackend", spec: StreamSpec, group: str, start: StartAt,
                 on_assign: AssignmentListener | None, linger_s: float = 0.0) -> None:
        self._backend = backend
        self._linger_s = linger_s
        self._spec = spec
        self._group = group
        self._start = start
        self._on_assign = on_assign
        self._queue: asyncio.Queue[RawMessage] = asyncio.Queue(maxsize=backend.fetch_batch * 4)
        self._fetchers: dict[int, asyncio.Task[None]] = {}
        self._pullers: dict[int, Puller] = {}
        self._failure: BaseException | None = None
        bucket = f"{backend.namespace}_members".upper().replace("-", "_")
        self._membership = Membership(
            backend.js,
            bucket=bucket,
            group_key=f"{spec.token}.{encode_durable(group)}",
            partitions=spec.partitions,
            on_change=self._desire,
            ttl=backend.member_ttl_s,
            member_id=backend.member_id,
            replicas=backend.stream_replicas(),
            refused=lambda: backend.refused(containing=bucket),
        )
        self._desired: frozenset[int] = frozenset()
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Join and start fetching the first owned partitions before returning."""
        await self._membership.join()
        self._changed.clear()
        await self._rebalance(self._desired)
        # Heartbeats and rebalancing run apart, so a long replay on a gained
        # partition never delays the heartbeat that keeps this member alive.
        for coro, name in ((self._membership.run(), "membership"), (self._reconcile(), "rebalance"),
                           (self._keep_alive(), "keep-alive")):
            task = asyncio.create_task(coro, name=f"{name}-{self._group}")
            task.add_done_callback(self._surface)
            self._tasks.append(task)

    async def _desire(self, owned: frozenset[int]) -> None:
        self._desired = owned
        self._changed.set()

    async def _reconcile(self) -> None:
        while True:
            await self._changed.wait()
            raise_if_cancelling()
            self._changed.clear()
            try:
                await self._rebalance(self._desired)
            except (nats.errors.Error, asyncio.TimeoutError) as exc:
                log.warning("rebalance of %s failed: %s; retrying", self._group, exc)
                await asyncio.sleep(0.5)
                self._changed.set()

    async def _keep_alive(self) -> None:
        """Every third of the ack wait, say that deliveries held that long
        (queued, being handled, their outputs awaited) are in progress, so
        the ack wait can be short without slow work being handed out again
        (see Puller.keep_alive)."""
        every = self._backend.ack_wait_s / 3
        while True:
            await asyncio.sleep(every)
            raise_if_cancelling()
            for puller in list(self._pullers.values()):
                try:
                    await puller.keep_alive(every)
                except nats.errors.Error as exc:  # reconnecting: the next round tells again
                    log.debug("keep-alive of %s: %r", self._group, exc)
                    break

    def owned(self) -> frozenset[int]:
        return frozenset(self._fetchers)

    async def committed(self, partition: int) -> int:
        name = nats_consumer_name(self._group, self._spec, partition)
        stream = nats_stream_name(self._backend.namespace, self._spec)
        try:
            info = await self._backend.js.consumer_info(stream, name)
        except NotFoundError:
            return 0
        return info.ack_floor.stream_seq if info.ack_floor else 0

    async def lag(self) -> dict[int, int]:
        stream = nats_stream_name(self._backend.namespace, self._spec)
        lags: dict[int, int] = {}
        for partition in sorted(self._fetchers):
            try:
                info = await self._backend.js.consumer_info(stream, nats_consumer_name(self._group, self._spec,
                                                                                       partition))
            except NotFoundError:
                continue
            lags[partition] = info.num_pending + info.num_ack_pending
        return lags

    async def messages(self) -> AsyncIterator[RawMessage]:
        taken = 0
        while not self.stopping:
            raise_if_cancelling()
            if self._failure is not None:
                raise BusError(f"subscription {self._group} failed: {self._failure}") from self._failure
            if not self._queue.empty():  # the usual case under load: no task and timer per message
                msg = self._queue.get_nowait()
                taken += 1
                if taken % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # let the service's other tasks run between long runs
            else:
                try:
                    msg = await asyncio.wait_for(self._queue.get(), timeout=1.0)
                except asyncio.TimeoutError:
                    continue
            if msg.partition not in self._fetchers or self.stopping:
                await msg.nak(0)  # lost this partition meanwhile: let the new owner have it now
                continue
            yield msg

    async def close(self) -> None:
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        log.debug("close %s: stopping membership", self._group)
        await cancel_until_done(self._tasks)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        log.debug("close %s: leaving", self._group)
        await self._membership.leave()
        log.debug("close %s: releasing partitions", self._group)
        await self._rebalance(frozenset())
        log.debug("close %s: returning %d fetched messages", self._group, self._queue.qsize())
        while not self._queue.empty():  # fetched but never handled: redeliver at once
            await self._queue.get_nowait().nak(0)

    async def _rebalance(self, owned: frozenset[int]) -> None:
        current = frozenset(self._fetchers)
        gained, lost = owned - current, current - owned
        for partition in lost:
            task = self._fetchers.pop(partition)  # the fetch loop sees this and ends
            self._pullers.pop(partition, None)
            task.cancel()
            # Bounded: on Python 3.11 a cancellation racing a message arrival can be
            # swallowed inside the client; the ownership check ends the loop anyway.
            await asyncio.wait({task}, timeout=5.0)
        if self._on_assign is not None and (gained or lost):
            await self._on_assign(self, frozenset(gained), frozenset(lost))
        for partition in sorted(gained):
            psub = await self._consumer(partition)
            self._pullers[partition] = psub
            task = asyncio.create_task(self._fetch(partition, psub), name=f"fetch-{self._group}-p{partition}")
            task.add_done_callback(self._surface)
            self._fetchers[partition] = task
        if gained or lost:
            log.info("group %s on %s: owns partitions %s", self._group, self._spec.name, sorted(owned))

    async def _consumer(self, partition: int) -> Puller:
        config = ConsumerConfig(
            durable_name=nats_consumer_name(self._group, self._spec, partition),
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self._backend.ack_wait_s,
            max_ack_pending=self._backend.fetch_batch * 4,
            filter_subject=nats_partition_filter(self._backend.namespace, self._spec, partition),
            **deliver_options(self._start),
        )
        return await self._backend.puller(nats_stream_name(self._backend.namespace, self._spec), config)

    async def _fetch(self, partition: int, psub: Puller) -> None:
        me = asyncio.current_task()
        try:
            while self._fetchers.get(partition) is me and not me.cancelling():
                try:
                    batch = await psub.fetch(self._backend.fetch_batch, timeout=1.0, linger=self._linger_s)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    continue  # nothing new within the poll window
                except nats.errors.Error as exc:  # reconnecting, draining, consumer being recreated
                    log.warning("fetch p%d of %s: %r; retrying", partition, self._spec.name, exc)
                    await asyncio.sleep(0.5)
                    continue
                for msg in batch:
                    if self._fetchers.get(partition) is not me:
                        await msg.nak()  # no longer ours: let the new owner have it at once
                        psub.settled(msg.reply)
                        continue
                    await self._queue.put(raw_message(msg, psub.settled))
        finally:
            try:
                await psub.close(return_unread=True)
            except Exception:
                pass

    def _surface(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._failure = task.exception()
