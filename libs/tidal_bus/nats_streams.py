"""JetStream streams and consumers as Tidal configures them: one stream per
Tidal stream, its retention and duplicate window; where a consumer starts."""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timezone
from typing import TypeVar

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from tidal_schemas.streams import StreamSpec

from .api import StartAt
from .errors import BusConfigError, BusError
from .subjects import nats_partition_filter, nats_stream_name

DUPLICATE_WINDOW_S = 120.0

log = logging.getLogger(__name__)
T = TypeVar("T")


async def create_stream(js: JetStreamContext, namespace: str, spec: StreamSpec, replicas: int,
                        refused: Callable[..., Exception | None], *, read_only: bool = False) -> None:
    """Create the stream of `spec` with `replicas`, or bring an existing one
    up to the catalogue; `refused(*api_subjects)` is the permission error
    the server reported for one of them, if any. `read_only` (a command that
    only reads) checks the stream is there and changes nothing."""
    name = nats_stream_name(namespace, spec)
    want = stream_config(namespace, spec, replicas)
    api = f"$JS.API.STREAM.%s.{name}"
    try:
        info = await electing(lambda: js.stream_info(name), f"stream {name}", refused=lambda: refused(api % "INFO"))
    except NotFoundError:
        info = None
    except (nats.errors.Error, asyncio.TimeoutError) as exc:
        raise refused(api % "INFO") or exc
    if read_only:
        if info is None:
            raise BusError(f"stream {name} does not exist: no Tidal service has run in namespace {namespace!r} "
                           f"on this bus")
        return
    try:
        if info is None:
            await electing(lambda: js.add_stream(want), f"stream {name}", refused=lambda: refused(api % "CREATE"))
            return
        update, changes = reconciled(info.config, want)
        if changes:
            log.warning("stream %s: %s (Tidal never lowers replicas or retention)", name, "; ".join(changes))
            await js.update_stream(update)  # once: a service may not be allowed to, and a refusal is a timeout
    except (nats.errors.Error, asyncio.TimeoutError):
        denied = refused(api % "CREATE", api % "UPDATE")
        if denied is None:
            raise
        if info is None:
            raise denied from None
        # Services may create missing streams but not change existing ones:
        # keep using the stream as it is and leave the change to the admin.
        log.warning("stream %s differs from the catalogue but %s; using it as it is", name, denied)


def stream_config(namespace: str, spec: StreamSpec, replicas: int = 1) -> StreamConfig:
    """The JetStream stream of a Tidal stream: file storage, `replicas`
    copies, limits by age and size (or the last message per subject for a
    state stream)."""
    return StreamConfig(
        name=nats_stream_name(namespace, spec),
        subjects=[nats_partition_filter(namespace, spec, None)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        max_age=0 if spec.keep_last_per_key else spec.max_age_s,
        max_msgs_per_subject=1 if spec.keep_last_per_key else -1,
        max_bytes=spec.max_bytes if spec.max_bytes is not None else -1,
        discard=DiscardPolicy.OLD,
        duplicate_window=DUPLICATE_WINDOW_S,
    )


def _unlimited_last(value: float | int | None) -> float:
    """A limit for comparing which keeps more: 0 or -1 (none) above any other."""
    return math.inf if value is None or value <= 0 else value


def reconciled(have: StreamConfig, want: StreamConfig) -> tuple[StreamConfig, list[str]]:
    """The existing stream `have` brought up to what Tidal needs, and the
    changes made (none: leave it alone). Only upward: more replicas, a
    longer age, more bytes, a longer duplicate window are kept as an
    operator set them, and every other setting of theirs (placement, a
    description, compression, …) is carried over. What Tidal's semantics
    depend on and an update cannot change (storage, retention) is refused."""
    for field in ("storage", "retention"):
        if getattr(have, field) != getattr(want, field):
            raise BusConfigError(f"stream {have.name} has {field} {getattr(have, field).value}, Tidal needs "
                                 f"{getattr(want, field).value}: JetStream cannot change it in place; move the "
                                 f"stream's messages and delete it")
    update = replace(have)
    changes = []

    def raise_to(field: str, value: float | int | None, *, unlimited: bool = True) -> None:
        current = getattr(have, field)
        higher = (_unlimited_last(value) > _unlimited_last(current)) if unlimited \
            else (value or 0) > (current or 0) + 1e-3
        if higher:
            setattr(update, field, value)
            changes.append(f"{field} {current} -> {value}")

    raise_to("num_replicas", want.num_replicas, unlimited=False)
    raise_to("max_age", want.max_age)
    raise_to("max_bytes", want.max_bytes)
    raise_to("duplicate_window", want.duplicate_window, unlimited=False)
    missing = sorted(set(want.subjects or []) - set(have.subjects or []))
    if missing:
        update.subjects = sorted(set(have.subjects or []) | set(missing))
        changes.append(f"subjects + {', '.join(missing)}")
    if (have.max_msgs_per_subject or -1) != (want.max_msgs_per_subject or -1):
        # a state stream keeps the last event of each key, an event stream every event: either is Tidal's meaning
        update.max_msgs_per_subject = want.max_msgs_per_subject
        changes.append(f"max_msgs_per_subject {have.max_msgs_per_subject} -> {want.max_msgs_per_subject}")
    if have.discard != want.discard:
        update.discard = want.discard
        changes.append(f"discard {have.discard.value if have.discard else None} -> {want.discard.value}")
    return update, changes


ELECTION_TRIES = 8


async def electing(call: Callable[[], Awaitable[T]], what: str, *, tries: int = ELECTION_TRIES,
                   refused: Callable[[], Exception | None] = lambda: None) -> T:
    """`call()` retried while the cluster cannot answer yet (a timeout, no
    response from a stream without a leader, or JetStream "unavailable" /
    "no suitable peers" while a cluster forms or elects a leader): bounded, with jittered exponential backoff (0.25 s
    doubling to 4 s, about 20 s in all), then the last error is raised."""
    for attempt in range(1, tries + 1):
        try:
            return await call()
        except (asyncio.TimeoutError, nats.errors.TimeoutError, NoStreamResponseError, APIError) as exc:
            if (isinstance(exc, APIError) and not _transient(exc)) or attempt == tries:
                raise
            if (denied := refused()) is not None:  # a refused request times out too: no use asking again
                raise denied from None
            delay = min(4.0, 0.25 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            log.info("%s: the cluster did not answer (%s); retrying in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def _transient(exc: APIError) -> bool:
    """JetStream's answers while a cluster forms or elects: any 503, and
    10005 (no suitable peers: the other servers not joined yet)."""
    return exc.code == 503 or exc.err_code == 10005


def deliver_options(start: StartAt) -> dict:
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
