"""Pulling batches from a JetStream consumer over JetStream's pull protocol:
one pull request per batch, its messages handed over by a subscription
callback into a buffer.

nats-py's `PullSubscription.fetch` waits for every message of a batch in a
task of its own with a timer of its own (a uuid, two tasks and a wait_for per
message): about a third of the CPU a followed event cost to read. Here a
batch costs one wait, and a request stays open until the server has sent
its batch or says it expired, so messages published meanwhile arrive without
a new request. A lingering fetch (a stage's samples) keeps no request open
while it waits: the server stores what comes meanwhile and sends it in one
answer, rather than a delivery (and a wake-up of the reader) per message."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable

import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.client import JetStreamContext

from .nats_delivery import delivery_of
from .nats_streams import electing

JS_API = "$JS.API"  # the backend's JetStream context uses the default API prefix
HEARTBEAT = "100"
EXPIRED = "408"  # the request's time is up: a new one is asked for at once
# The server's word that a request was cut short (consumer deleted, leadership
# change, too many waiting) or found nothing: not asked again within the same
# fetch, so a consumer that keeps refusing costs a request per timeout.
CUT_SHORT = frozenset({"404", "409"})
GRACE_S = 1.0  # past its expiry and this, a request whose end we never heard of is taken as over
CREATE_TRIES, CREATE_RETRY_S = 4, 0.25  # a consumer the server failed to create: tried again, waits doubling

log = logging.getLogger(__name__)


class Puller:
    """The pulling end of one consumer; `fetch` as nats-py's, without its
    per-message tasks."""

    def __init__(self, nc: Client, js: JetStreamContext, stream: str, consumer: str) -> None:
        self.stream, self.consumer = stream, consumer
        self._nc, self._js = nc, js
        self._next = f"{JS_API}.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = nc.new_inbox()
        self._arrived: deque[Msg] = deque()
        self._changed = asyncio.Event()
        self._failure: Exception | None = None
        self._owed = 0  # messages the open request may still bring
        self._open_until = 0.0  # loop time past which the open request is taken as over
        self._cut_short = False  # the last request was cut short within this fetch
        self._sub = None
        # Deliveries not yet acked or naked, by reply subject: when each was
        # last delivered or said to be in progress (loop time; see keep_alive).
        # Kept only for a consumer that waits for acks (a reader's never come).
        self.held: dict[str, float] = {}
        self._holds = True

    @classmethod
    async def open(cls, nc: Client, js: JetStreamContext, stream: str, config: ConsumerConfig,
                   refused: Callable[[], Exception | None] = lambda: None) -> "Puller":
        """Create the consumer (a durable one only when it does not exist:
        as `pull_subscribe` does) and subscribe to its deliveries. A durable
        whose filter leaves out the stream's side lane, as a group's did
        before the stream had one, gets the filter it is given: it would
        otherwise never be sent the lane's events; one whose ack wait
        differs gets the one it is given."""
        name = config.durable_name
        if name:
            try:
                found = (await electing(lambda: js.consumer_info(stream, name), f"consumer {name}", refused=refused)).config
            except nats.js.errors.NotFoundError:
                config.name = name
                await _add_consumer(js, stream, config, refused)
            else:
                changed = False
                if config.filter_subject and found.filter_subject != config.filter_subject:
                    found.filter_subject, changed = config.filter_subject, True
                if config.ack_wait and found.ack_wait != config.ack_wait:  # e.g. an older release's 30 s
                    found.ack_wait, changed = config.ack_wait, True
                if changed:  # the rest as it was: where it is, what it owes
                    await _add_consumer(js, stream, found, refused)
        else:  # ephemeral: a name of our own, as nats-py gives one (the permissions expect a name)
            config.name = uuid.uuid4().hex
            await _add_consumer(js, stream, config, refused, renamed=True)
            name = config.name
        puller = cls(nc, js, stream, name)
        puller._holds = config.ack_policy != AckPolicy.NONE
        puller._sub = await nc.subscribe(puller._inbox, cb=puller._arrive)
        return puller

    async def _arrive(self, msg: Msg) -> None:
        status = msg.headers.get("Status") if msg.headers and not msg.data else None
        if status is None:
            self._arrived.append(msg)
            self._owed -= 1
            if self._holds and msg.reply:
                self.held[msg.reply] = asyncio.get_running_loop().time()
        elif status == EXPIRED:
            self._owed = 0
        elif status in CUT_SHORT:
            self._owed, self._cut_short = 0, True
        elif status != HEARTBEAT:  # e.g. 503: the consumer is gone, or JetStream is not answering
            self._owed, self._cut_short = 0, True
            try:
                nats.js.errors.APIError.from_msg(msg)  # nats-py's error for the status: it raises it
            except nats.errors.Error as exc:
                self._failure = exc
        self._changed.set()

    async def fetch(self, batch: int, timeout: float, linger: float = 0.0) -> list[Msg]:
        """Up to `batch` messages: those already here, else the first to come
        within `timeout` and those with it. Raises nats' TimeoutError when
        none came, and the server's error when it refused the pull.

        With `linger` (seconds), the first is held that long and the rest
        asked for then, in one request the server answers from what it
        stored meanwhile (at once when more were stored already: a backlog
        is read at full speed): a trickle of messages (a stage's samples, a few
        each millisecond over eight partitions) comes as one delivery per
        batch rather than one per message (see `ServiceSettings.input_linger_s`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._cut_short = False
        ask = 1 if linger else batch  # lingering: an open request brings only the first
        while not self._arrived and self._failure is None:
            now = loop.time()
            if now >= deadline:
                raise nats.errors.TimeoutError
            self._changed.clear()  # before the publish, which may let deliveries in
            if (self._owed <= 0 or now > self._open_until) and not self._cut_short:
                await self._ask({"batch": ask, "expires": int(timeout * 1e9)}, now + timeout + GRACE_S)
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - now)
            except asyncio.TimeoutError:
                raise nats.errors.TimeoutError from None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        if linger and len(self._arrived) < batch:
            if not delivery_of(self._arrived[-1]).pending:  # a trickle, not a backlog: wait for more
                await asyncio.sleep(linger)  # cancelled here, what arrived stays for close() to return
            await self._top_up(batch - len(self._arrived))
        return [self._arrived.popleft() for _ in range(min(batch, len(self._arrived)))]

    async def _ask(self, request: dict, open_until: float) -> None:
        self._owed, self._open_until = request["batch"], open_until
        await self._nc.publish(self._next, orjson.dumps(request), reply=self._inbox)

    async def _top_up(self, want: int) -> None:
        """Ask for up to `want` more of what the server holds now, and wait
        until they came or it said there are no more (or GRACE_S passed)."""
        if want <= 0 or (self._owed > 0 and asyncio.get_running_loop().time() <= self._open_until):
            return  # a request is still open: what it brings arrives by itself
        loop = asyncio.get_running_loop()
        until = loop.time() + GRACE_S
        self._changed.clear()
        await self._ask({"batch": want, "no_wait": True}, until)  # ended by the last message or a 404 / 408
        while self._owed > 0 and self._failure is None and (left := until - loop.time()) > 0:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                return

    def settled(self, reply: str) -> None:
        """`reply`'s delivery was acked or naked: no longer held."""
        self.held.pop(reply, None)

    async def keep_alive(self, older_than_s: float) -> int:
        """Tell the server that deliveries held `older_than_s` or longer are
        still being worked on (`+WPI`), which restarts their ack wait. This
        is what lets the ack wait be short: a delivery lost in flight (its
        connection died with a killed server) is handed out again after one
        ack wait, and a slow one is not. Returns how many were told."""
        now = asyncio.get_running_loop().time()
        due = [reply for reply, at in self.held.items() if now - at >= older_than_s]
        for reply in due:
            await self._nc.publish(reply, b"+WPI")
            if reply in self.held:
                self.held[reply] = now
        return len(due)

    async def consumer_info(self):
        return await self._js.consumer_info(self.stream, self.consumer)

    async def close(self, *, return_unread: bool = False) -> None:
        """Stop taking deliveries; `return_unread`: nak what arrived and was
        never fetched, so that another member gets it now, not after ack_wait."""
        if self._sub is not None:
            await self._sub.unsubscribe()
        while return_unread and self._arrived:
            msg = self._arrived.popleft()
            await msg.nak()
            self.settled(msg.reply)


async def _add_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig,
                        refused: Callable[[], Exception | None], *, renamed: bool = False) -> None:
    """Create (or update) a consumer. The server's own failure (500: it could
    not create the consumer's store) is tried again, an ephemeral consumer
    under a new name; a refusal (4xx) is not."""
    for attempt in range(1, CREATE_TRIES + 1):
        try:
            await electing(lambda: js.add_consumer(stream, config=config), f"consumer {config.name}",
                           refused=refused)
            return
        except nats.js.errors.ServerError as exc:
            if attempt == CREATE_TRIES:
                raise
            delay = CREATE_RETRY_S * 2 ** (attempt - 1)
            log.warning("consumer %s of stream %s not created (%s); trying again in %.2fs", config.name, stream,
                        exc.description, delay)
            await asyncio.sleep(delay)
            if renamed:
                config.name = uuid.uuid4().hex
