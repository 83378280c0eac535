"""NATS JetStream backend.

Layout: one file-backed stream per Tidal stream (`TIDAL_NODE_METRICS`),
subjects `{ns}.{stream}.{cluster}.{partition}.{key}` (and `.{lane}` after it for
the stream's side lane, `StreamSpec.side_lane`). A consumer group is one durable
pull consumer per partition (filtered on the partition token); the group's members
split the partitions between them (membership.py): a key is handled by one at a time.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import uuid
from collections.abc import AsyncIterator

import nats.errors  # binds `nats` too
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import NotFoundError

from tidal_schemas.streams import StreamSpec, partition_for

from .api import AssignmentListener, Backend, GroupSubscription, Position, RawMessage, StartAt, known
from .auth import BusAuth, BusPermissionError, redact_url
from .errors import BusConfigError, BusError
from .intake import EventTooLarge, check_size, dedupe_key
from .nats_group import NatsGroupSubscription
from .nats_pull import Puller
from .nats_reader import read_stream
from .nats_refusals import AUTH_FAILURE, Refusals, credentials_hint
from .nats_cluster import checked_replicas, server_in_use, stream_replicas
from .nats_streams import create_stream
from .subjects import nats_stream_name, nats_subject
from .trace_context import TraceContext

log = logging.getLogger(__name__)
PUBLISH_ACK_WAIT_S = 2.0  # one try of a publish: how long the server's ack is waited for


class NatsBackend(Backend):
    def __init__(
        self,
        url: str,
        namespace: str,
        *,
        ack_wait_s: float = 5.0,
        member_ttl_s: float = 6.0,
        fetch_batch: int = 64,
        read_batch: int = 256,
        publish_timeout_s: float = 30.0,
        connect_deadline_s: float = 30.0,
        connect_options: dict | None = None,
        replicas: int | None = None,
        read_only: bool = False,
        auth: BusAuth | None = None,
    ) -> None:
        self.url = url
        self.servers = url.split(",")  # one URL per seed server (backends.py writes them so)
        self.replicas = checked_replicas(replicas)  # None: 3 on a cluster of 3 or more servers, else 1
        self.read_only = read_only  # a command that only reads: streams are looked up, never created or changed
        self.auth = auth if auth is not None else BusAuth.from_env()
        self._auth_options = self.auth.nats_options(url)  # fails now on a bad combination
        self.namespace = namespace
        self.ack_wait_s = ack_wait_s
        self.member_ttl_s = member_ttl_s
        # Messages per pull request of a group member. 64, not 256: its messages keep coming while the
        # last batch is handled, and at 256 placement's peak was 6.5 MiB higher in bench/burst.py and a
        # group consumer's read cost more in bench/bus_read.py (one pair of runs each).
        self.fetch_batch = fetch_batch
        self.read_batch = read_batch  # per fetch of a reader, a stream followed without a group (nats_reader)
        self.publish_timeout_s = publish_timeout_s
        self.connect_deadline_s = connect_deadline_s
        self._connect_options = connect_options or {}
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._known_streams: set[str] = set()
        self._creating = asyncio.Lock()
        self._closing = False
        self._refusals = Refusals()
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
            refused = self._refusals.note(text)
            if refused:
                log.warning("nats: the server refused %s to %s (not permitted for this user)", *refused)
                return
            if not failure.done() and (AUTH_FAILURE.search(text) or isinstance(exc, ssl.SSLError)):
                # Credentials or certificates are wrong: retrying cannot help, say so now.
                failure.set_result(f"{type(exc).__name__}: {text}" if isinstance(exc, ssl.SSLError) else text)
            log.info("nats: %s", text)

        async def on_disconnect() -> None:
            if not self._closing:
                log.warning("nats: disconnected from %s", self.server_in_use)

        async def on_reconnect() -> None:
            log.info("nats: reconnected to %s", self.server_in_use)

        options = dict(
            servers=self.servers,
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
                                     f"{credentials_hint(failure.result())}")
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
        log.info("nats: connected to %s", self.server_in_use)

    @property
    def server_in_use(self) -> str:
        return server_in_use(self._nc, self.safe_url)

    def stream_replicas(self) -> int:
        return stream_replicas(self.replicas, (self._nc._server_info if self._nc else None) or {}, self.server_in_use)

    def refused(self, *subjects: str, containing: str | None = None) -> BusPermissionError | None:
        """The permission error the server reported for one of `subjects`
        (or for any subject containing `containing`), else None."""
        return self._refusals.error(self.auth.user_name(self.url) or "(no user)", *subjects, containing=containing)

    async def close(self) -> None:
        self._closing = True
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.drain()
        self._nc = None

    async def reconnect(self) -> None:
        """Log in again now, reading the creds file anew (renewed credentials)."""
        await (self._nc.force_reconnect() if self._nc is not None else asyncio.sleep(0))

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    async def unavailable(self) -> str | None:
        """JetStream answers the account's info only while its cluster has a quorum."""
        if not self.connected:
            return "bus disconnected"
        try:
            await self.js.account_info()
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            return f"JetStream unavailable on {self.server_in_use}: {type(exc).__name__} {exc}".rstrip()
        return None

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
        # one creation at a time: publishes that waited for it go on in the order they came
        async with self._creating:
            if name not in self._known_streams:
                await create_stream(self.js, self.namespace, spec, self.stream_replicas(), self.refused,
                                    read_only=self.read_only)
                self._known_streams.add(name)

    async def delete_stream(self, spec: StreamSpec) -> None:
        name = nats_stream_name(self.namespace, spec)
        try:
            await self.js.delete_stream(name)
        except NotFoundError:
            pass
        self._known_streams.discard(name)

    async def publish(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str,
                      trace: TraceContext | None = None, lane: str | None = None) -> int:
        await self.ensure_stream(spec)
        subject, headers = self._addressed(spec, cluster, key, data, msg_id, trace, lane)
        # The broker may be restarting: retry within a bound. Retrying is safe:
        # the message id makes the server drop a second copy, and where there is
        # none, consumers drop it by event id.
        deadline = asyncio.get_running_loop().time() + self.publish_timeout_s
        delay = 0.1
        while True:
            try:
                ack = await self.js.publish(subject, data, timeout=PUBLISH_ACK_WAIT_S, headers=headers)
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

    async def send(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str,
                   trace: TraceContext | None = None, lane: str | None = None) -> Position:
        await self.ensure_stream(spec)
        subject, headers = self._addressed(spec, cluster, key, data, msg_id, trace, lane)
        try:
            acked = await self.js.publish_async(subject, data, headers=headers)
        except nats.errors.Error:  # not even handed over (reconnecting…): wait, with publish's retries
            return known(await self.publish(spec, cluster, key, data, msg_id, trace, lane))

        async def position() -> int:
            try:
                return (await asyncio.wait_for(acked, PUBLISH_ACK_WAIT_S)).seq
            except (nats.errors.Error, asyncio.TimeoutError) as exc:
                # lost or refused: sent again, waiting (the server stores an id once)
                log.info("publish to %s: %r; sending it again", subject, exc)
                return await self.publish(spec, cluster, key, data, msg_id, trace, lane)
        return position()

    def _addressed(self, spec: StreamSpec, cluster: str, key: str, data: bytes, msg_id: str,
                   trace: TraceContext | None, lane: str | None) -> tuple[str, dict[str, str] | None]:
        """The subject and headers of a message; EventTooLarge over the server's limit."""
        subject = nats_subject(self.namespace, spec, cluster, partition_for(key, spec.partitions), key, lane)
        # The server drops a second message with the same id within its window
        # (so a retried publish appends once); ids are scoped to the key, and
        # streams node agents write do without it (see StreamSpec.written_by_nodes).
        scoped = dedupe_key(cluster, key, msg_id) if msg_id and not spec.written_by_nodes else ""
        headers = {"Nats-Msg-Id": scoped} if scoped else None
        if trace is not None:
            headers = {**(headers or {}), **trace.headers()}
        if self._nc is not None:
            # Over max_payload (headers count) the server closes the connection,
            # and every retry would close it again: refuse the message here.
            header_bytes = 12 + sum(len(k) + len(v) + 4 for k, v in headers.items()) if headers else 0
            check_size(len(data) + header_bytes, f"message to {subject}", self._nc.max_payload)
        return subject, headers

    # -- consuming -----------------------------------------------------------
    async def subscribe(self, spec: StreamSpec, group: str, start: StartAt, *,
                        on_assign: AssignmentListener | None = None, linger_s: float = 0.0) -> GroupSubscription:
        await self.ensure_stream(spec)
        sub = NatsGroupSubscription(self, spec, group, start, on_assign, linger_s)
        try:
            await sub.start()
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            raise self.refused(containing=nats_stream_name(self.namespace, spec)) \
                or self.refused(containing="$KV.") or exc
        return sub

    def read(self, spec: StreamSpec, start: StartAt, *, partitions: frozenset[int] | None = None,
             until: dict[int, int] | None = None, follow: bool = False,
             linger_s: float = 0.0, main_lane_only: bool = False) -> AsyncIterator[RawMessage]:
        return read_stream(self, spec, start, partitions=partitions, until=until, follow=follow, linger_s=linger_s,
                           main_lane_only=main_lane_only)

    async def puller(self, stream_name: str, config: ConsumerConfig) -> Puller:
        """The pulling end of a consumer of `stream_name` (created when it does not exist)."""
        if self._nc is None:
            raise BusError("NATS backend used before connect()")
        # a refused request times out like an unanswered one: a refusal noted for the stream ends the retries
        return await Puller.open(self._nc, self.js, stream_name, config, lambda: self.refused(containing=stream_name))
