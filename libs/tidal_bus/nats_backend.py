"""NATS JetStream backend.

Layout: one file-backed stream per Tidal stream (`TIDAL_NODE_METRICS`),
subjects `{ns}.{stream}.{cluster}.{partition}.{key}`. A consumer group is one
durable pull consumer per partition (filtered on the partition token); the
group's members split the partitions between them (see membership.py), so a
key is handled by one member at a time, in order.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import uuid
from collections.abc import AsyncIterator
from datetime import timezone

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from tidal_schemas.streams import StreamSpec, partition_for

from .api import AssignmentListener, Backend, GroupSubscription, RawMessage, StartAt
from .auth import BusAuth, BusPermissionError, redact_url
from .errors import BusConfigError, BusError
from .intake import EventTooLarge, check_size, dedupe_key
from .membership import Membership, raise_if_cancelling
from .subjects import (
    decode_token,
    encode_durable,
    nats_consumer_name,
    nats_partition_filter,
    nats_stream_name,
    nats_subject,
)

log = logging.getLogger(__name__)

DUPLICATE_WINDOW_S = 120.0

# nats-py reports a refused publish or subscription only as text on the error
# callback ("nats: permissions violation for publish to \"subj\""), and the
# request itself then times out: remembering the refusals turns that timeout
# into a clear, non-retriable error.
_VIOLATION = re.compile(r"permissions violation for (publish|subscription) to \"?([^\"\s]+)", re.IGNORECASE)
_AUTH_FAILURE = re.compile(r"authorization violation|authentication (error|timeout)|user authentication expired",
                           re.IGNORECASE)


class NatsBackend(Backend):
    def __init__(
        self,
        url: str,
        namespace: str,
        *,
        ack_wait_s: float = 30.0,
        member_ttl_s: float = 6.0,
        fetch_batch: int = 256,
        publish_timeout_s: float = 30.0,
        connect_deadline_s: float = 30.0,
        connect_options: dict | None = None,
        auth: BusAuth | None = None,
    ) -> None:
        self.url = url
        self.auth = auth if auth is not None else BusAuth.from_env()
        self._auth_options = self.auth.nats_options(url)  # fails now on a bad combination
        self.namespace = namespace
        self.ack_wait_s = ack_wait_s
        self.member_ttl_s = member_ttl_s
        self.fetch_batch = fetch_batch
        self.publish_timeout_s = publish_timeout_s
        self.connect_deadline_s = connect_deadline_s
        self._connect_options = connect_options or {}
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._known_streams: set[str] = set()
        self._closing = False
        self._refused: dict[str, str] = {}  # subject (lowercase) -> "publish" / "subscription"
        self._connect_failure: asyncio.Future[str] | None = None
        self.member_id = uuid.uuid4().hex[:12]

    @property
    def safe_url(self) -> str:
        """The URL with any password hidden: the only form ever logged."""
        return redact_url(self.url)

    # -- lifecycle -----------------------------------------------------------
    async def connect(self) -> None:
        failure: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_error(exc: Exception) -> None:
            text = redact_url(str(exc))
            refused = _VIOLATION.search(text)
            if refused:
                # nats-py lowercases the server's message: subjects are compared in lowercase
                self._refused[refused.group(2).lower()] = refused.group(1).lower()
                log.warning("nats: the server refused %s to %s (not permitted for this user)",
                            refused.group(1).lower(), refused.group(2))
                return
            if not failure.done() and (_AUTH_FAILURE.search(text) or isinstance(exc, ssl.SSLError)):
                # Credentials or certificates are wrong: retrying cannot help, say so now.
                failure.set_result(f"{type(exc).__name__}: {text}" if isinstance(exc, ssl.SSLError) else text)
            log.info("nats: %s", text)

        async def on_disconnect() -> None:
            if not self._closing:
                log.warning("nats: disconnected from %s", self.safe_url)

        async def on_reconnect() -> None:
            log.info("nats: reconnected to %s", self.safe_url)

        options = dict(
            servers=[self.url],
            name=f"tidal-{self.namespace}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            connect_timeout=5,
            error_cb=on_error,
            disconnected_cb=on_disconnect,
            reconnected_cb=on_reconnect,
        )
        options.update(self._auth_options)
        options.update(self._connect_options)
        # Once connected, reconnect forever; the first connection, though, must
        # come within a deadline so a wrong URL fails instead of hanging, and
        # a refused login or certificate fails at once.
        attempt = asyncio.ensure_future(nats.connect(**options))
        try:
            done, _ = await asyncio.wait({attempt, failure}, timeout=self.connect_deadline_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            if attempt in done:
                self._nc = attempt.result()
            elif failure in done:
                raise BusConfigError(f"cannot connect to NATS at {self.safe_url}: {failure.result()}"
                                     f"{_credentials_hint(failure.result())}")
            else:
                raise asyncio.TimeoutError
        except (OSError, nats.errors.Error, asyncio.TimeoutError) as exc:
            reason = f"no answer within {self.connect_deadline_s:.0f}s" if isinstance(exc, asyncio.TimeoutError) \
                else redact_url(str(exc) or type(exc).__name__)
            raise BusError(f"cannot connect to NATS at {self.safe_url}: {reason}") from None
        finally:
            if not attempt.done():
                attempt.cancel()
                await asyncio.wait({attempt})
        self._js = self._nc.jetstream()

    def refused(self, *subjects: str, containing: str | None = None) -> BusPermissionError | None:
        """The permission error the server reported for one of `subjects`
        (or for any subject containing `containing`), else None."""
        said = next((f"{self._refused[s.lower()]} to {s}" for s in subjects if s.lower() in self._refused), None)
        if said is None and containing is not None:
            said = next((f"{verb} to {subject}" for subject, verb in self._refused.items()
                         if containing.lower() in subject), None)
        if said is None:
            return None
        user = self.auth.user_name(self.url) or "(no user)"
        return BusPermissionError(f"NATS refused {said}: user {user} is not permitted to "
                                  "(see the server's authorization, e.g. from `tidal nats-config`)")

    async def close(self) -> None:
        self._closing = True
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.drain()
        self._nc = None

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def js(self) -> JetStreamContext:
        if self._js is None:
            raise BusError("NATS backend used before connect()")
        return self._js

    # -- streams -------------------------------------------------------------
    async def ensure_stream(self, spec: StreamSpec) -> None:
        name = nats_stream_name(self.namespace, spec)
        if name in self._known_streams:
            return
        config = StreamConfig(
            name=name,
            subjects=[nats_partition_filter(self.namespace, spec, None)],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            max_age=0 if spec.keep_last_per_key else spec.max_age_s,
            max_msgs_per_subject=1 if spec.keep_last_per_key else -1,
            max_bytes=spec.max_bytes if spec.max_bytes is not None else -1,
            discard=DiscardPolicy.OLD,
            duplicate_window=DUPLICATE_WINDOW_S,
        )
        api = f"$JS.API.STREAM.%s.{name}"
        try:
            info = await self.js.stream_info(name)
        except NotFoundError:
            info = None
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            raise self.refused(api % "INFO") or exc
        try:
            if info is None:
                await self.js.add_stream(config)
            elif not _same_stream_config(info.config, config):
                await self.js.update_stream(config)
        except (nats.errors.Error, asyncio.TimeoutError):
            denied = self.refused(api % "CREATE", api % "UPDATE")
            if denied is None:
                raise
            if info is None:
                raise denied from None
            # Services may create missing streams but not change existing ones:
            # keep using the stream as it is and leave the change to the admin.
            log.warning("stream %s differs from the catalogue but %s; using it as it is", name, denied)
        self._known_streams.add(name)

    async def delete_stream(self, spec: StreamSpec) -> None:
        name = nats_stream_name(self.namespace, spec)
        try:
            await self.js.delete_stream(name)
        except NotFoundError:
            pass
        self._known_streams.discard(name)

    async def publish(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str) -> int:
        await self.ensure_stream(spec)
        subject = nats_subject(self.namespace, spec, cluster, partition_for(key, spec.partitions), key)
        # The server drops a second message with the same id within its window
        # (so a retried publish appends once); ids are scoped to the key, and
        # streams node agents write do without it (see StreamSpec.written_by_nodes).
        scoped = dedupe_key(cluster, key, msg_id) if msg_id and not spec.written_by_nodes else ""
        headers = {"Nats-Msg-Id": scoped} if scoped else None
        if self._nc is not None:
            # Over max_payload (headers count) the server closes the connection,
            # and every retry would close it again: refuse the message here.
            header_bytes = 12 + sum(len(k) + len(v) + 4 for k, v in headers.items()) if headers else 0
            check_size(len(data) + header_bytes, f"message to {subject}", self._nc.max_payload)
        # The broker may be restarting: retry within a bound. Retrying is safe:
        # the message id makes the server drop a second copy, and where there is
        # none, consumers drop it by event id.
        deadline = asyncio.get_running_loop().time() + self.publish_timeout_s
        delay = 0.1
        while True:
            try:
                ack = await self.js.publish(subject, data, timeout=2.0, headers=headers)
                return ack.seq
            except nats.errors.MaxPayloadError as exc:
                raise EventTooLarge(f"message to {subject}: {len(data)} bytes, refused by NATS: {exc}") from None
            except (nats.errors.Error, asyncio.TimeoutError) as exc:
                denied = self.refused(subject)
                if denied is not None:  # retrying cannot help
                    raise denied from None
                if asyncio.get_running_loop().time() + delay > deadline:
                    raise BusError(f"publish to {subject} failed for {self.publish_timeout_s}s: {exc!r}") from exc
                log.info("publish to %s: %r; retrying", subject, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    # -- consuming -----------------------------------------------------------
    async def subscribe(
        self,
        spec: StreamSpec,
        group: str,
        start: StartAt,
        *,
        on_assign: AssignmentListener | None = None,
    ) -> GroupSubscription:
        await self.ensure_stream(spec)
        sub = _NatsGroupSubscription(self, spec, group, start, on_assign)
        try:
            await sub.start()
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            raise self.refused(containing=nats_stream_name(self.namespace, spec)) \
                or self.refused(containing="$KV.") or exc
        return sub

    async def read(
        self,
        spec: StreamSpec,
        start: StartAt,
        *,
        partitions: frozenset[int] | None = None,
        until: dict[int, int] | None = None,
        follow: bool = False,
    ) -> AsyncIterator[RawMessage]:
        await self.ensure_stream(spec)
        if partitions is None:
            filters = [nats_partition_filter(self.namespace, spec, None)]
        else:
            filters = [nats_partition_filter(self.namespace, spec, p) for p in sorted(partitions)]
            if not filters:
                return
        limit = max(until.values()) if until else None
        last: int | None = None  # stream sequence of the last message read
        while True:
            # Following, a broker restart or a lost connection does not end the
            # read: a new reader starts right after the last message read.
            raise_if_cancelling()
            try:
                psub = await self._reader(spec, filters, start if last is None else StartAt.at_sequence(last + 1))
            except (nats.errors.Error, asyncio.TimeoutError) as exc:
                if not follow:
                    raise
                log.warning("reading %s: %r; trying again", spec.name, exc)
                await asyncio.sleep(0.5)
                continue
            try:
                if not follow and (await psub.consumer_info()).num_pending == 0:
                    return  # nothing there: do not wait out a fetch timeout
                while True:
                    raise_if_cancelling()
                    try:
                        batch = await psub.fetch(self.fetch_batch, timeout=1.0)
                    except (nats.errors.TimeoutError, asyncio.TimeoutError):
                        if follow:
                            continue
                        return
                    except nats.errors.Error as exc:
                        if not follow:
                            raise
                        log.warning("reading %s: %r; reading again after sequence %s", spec.name, exc, last)
                        await asyncio.sleep(0.5)
                        break
                    for msg in batch:
                        raw = self._raw(msg)
                        last = raw.position
                        if until is not None and raw.position > until.get(raw.partition, 0):
                            if limit is not None and raw.position > limit:
                                return
                            continue
                        yield raw
                        if not follow and msg.metadata.num_pending == 0:
                            return
            finally:
                try:
                    await psub.unsubscribe()
                except Exception:
                    pass

    async def _reader(self, spec: StreamSpec, filters: list[str], start: StartAt):
        """An ephemeral, unacknowledged pull consumer over `filters` from `start`."""
        config = ConsumerConfig(
            ack_policy=AckPolicy.NONE,
            inactive_threshold=60.0,
            **_deliver_options(start),
            **({"filter_subjects": filters} if len(filters) > 1 else {"filter_subject": filters[0]}),
        )
        return await self.js.pull_subscribe(
            filters[0], durable=None, stream=nats_stream_name(self.namespace, spec), config=config
        )

    def _raw(self, msg: Msg) -> RawMessage:
        tokens = msg.subject.split(".")
        meta = msg.metadata

        async def ack() -> None:
            if self._needs_ack(msg):
                await msg.ack()

        async def nak(delay: float) -> None:
            if self._needs_ack(msg):
                await msg.nak(delay=delay if delay > 0 else None)

        return RawMessage(
            data=msg.data,
            key=decode_token(tokens[-1]),
            partition=int(tokens[-2]),
            position=meta.sequence.stream,
            deliveries=meta.num_delivered,
            ack=ack,
            nak=nak,
            pending=meta.num_pending,
            stored_at=meta.timestamp,
            cluster=decode_token(tokens[-3]),
        )

    @staticmethod
    def _needs_ack(msg: Msg) -> bool:
        return bool(msg.reply)


def _same_stream_config(have: StreamConfig, want: StreamConfig) -> bool:
    """Whether an existing stream already has the settings Tidal sets."""
    def close(a: float | None, b: float | None) -> bool:
        return abs((a or 0) - (b or 0)) < 1e-3
    return (sorted(have.subjects or []) == sorted(want.subjects or []) and have.retention == want.retention
            and have.storage == want.storage and have.discard == want.discard
            and (have.max_bytes or -1) == (want.max_bytes or -1)
            and (have.max_msgs_per_subject or -1) == (want.max_msgs_per_subject or -1)
            and close(have.max_age, want.max_age) and close(have.duplicate_window, want.duplicate_window))


def _credentials_hint(reason: str) -> str:
    """What to set, given why the server or the TLS handshake refused us."""
    text = reason.lower()
    if "certificate required" in text:
        return " (the server requires a client certificate: set TIDAL_BUS_TLS_CERT_FILE and TIDAL_BUS_TLS_KEY_FILE)"
    if "certificate" in text or "ssl" in text:
        return " (the server's certificate is not trusted: set TIDAL_BUS_TLS_CA_FILE to its CA)"
    return " (check TIDAL_BUS_USER / TIDAL_BUS_PASSWORD_FILE / TIDAL_BUS_CREDS_FILE)"


def _deliver_options(start: StartAt) -> dict:
    if start.kind == "earliest":
        return {"deliver_policy": DeliverPolicy.ALL}
    if start.kind == "latest":
        return {"deliver_policy": DeliverPolicy.NEW}
    if start.kind == "time":
        assert start.time is not None
        return {"deliver_policy": DeliverPolicy.BY_START_TIME,
                "opt_start_time": start.time.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")}
    if start.kind == "after":
        # one sequence space for every partition: resume after the highest seen
        last = max((position for _, position in start.positions), default=0)
        return {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": last + 1}
    return {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": start.sequence}


class _NatsGroupSubscription(GroupSubscription):
    """Owns one pull fetcher per owned partition, feeding one queue."""

    def __init__(self, backend: NatsBackend, spec: StreamSpec, group: str, start: StartAt,
                 on_assign: AssignmentListener | None) -> None:
        self._backend = backend
        self._spec = spec
        self._group = group
        self._start = start
        self._on_assign = on_assign
        self._queue: asyncio.Queue[RawMessage] = asyncio.Queue(maxsize=backend.fetch_batch * 4)
        self._fetchers: dict[int, asyncio.Task[None]] = {}
        self._failure: BaseException | None = None
        self._membership = Membership(
            backend.js,
            bucket=f"{backend.namespace}_members".upper().replace("-", "_"),
            group_key=f"{spec.token}.{encode_durable(group)}",
            partitions=spec.partitions,
            on_change=self._desire,
            ttl=backend.member_ttl_s,
            member_id=backend.member_id,
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
        for coro, name in ((self._membership.run(), "membership"), (self._reconcile(), "rebalance")):
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
        while not self.stopping:
            raise_if_cancelling()
            if self._failure is not None:
                raise BusError(f"subscription {self._group} failed: {self._failure}") from self._failure
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
            task.cancel()
            # Bounded: on Python 3.11 a cancellation racing a message arrival can be
            # swallowed inside the client; the ownership check ends the loop anyway.
            await asyncio.wait({task}, timeout=5.0)
        if self._on_assign is not None and (gained or lost):
            await self._on_assign(self, frozenset(gained), frozenset(lost))
        for partition in sorted(gained):
            psub = await self._consumer(partition)
            task = asyncio.create_task(self._fetch(partition, psub), name=f"fetch-{self._group}-p{partition}")
            task.add_done_callback(self._surface)
            self._fetchers[partition] = task
        if gained or lost:
            log.info("group %s on %s: owns partitions %s", self._group, self._spec.name, sorted(owned))

    async def _consumer(self, partition: int):  # -> JetStreamContext.PullSubscription
        js = self._backend.js
        config = ConsumerConfig(
            durable_name=nats_consumer_name(self._group, self._spec, partition),
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self._backend.ack_wait_s,
            max_ack_pending=self._backend.fetch_batch * 4,
            filter_subject=nats_partition_filter(self._backend.namespace, self._spec, partition),
            **_deliver_options(self._start),
        )
        return await js.pull_subscribe(
            config.filter_subject,
            durable=config.durable_name,
            stream=nats_stream_name(self._backend.namespace, self._spec),
            config=config,
        )

    async def _fetch(self, partition: int, psub) -> None:
        me = asyncio.current_task()
        try:
            while self._fetchers.get(partition) is me and not me.cancelling():
                try:
                    batch = await psub.fetch(self._backend.fetch_batch, timeout=1.0)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    continue  # nothing new within the poll window
                except nats.errors.Error as exc:  # reconnecting, draining, consumer being recreated
                    log.warning("fetch p%d of %s: %r; retrying", partition, self._spec.name, exc)
                    await asyncio.sleep(0.5)
                    continue
                for msg in batch:
                    if self._fetchers.get(partition) is not me:
                        await msg.nak()  # no longer ours: let the new owner have it at once
                        continue
                    await self._queue.put(self._backend._raw(msg))
        finally:
            try:
                await psub.unsubscribe()
            except Exception:
                pass

    def _surface(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._failure = task.exception()
