"""JetStream streams and consumers as Tidal configures them: one stream per
Tidal stream, its retention and duplicate window; where a consumer starts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timezone

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from tidal_schemas.streams import StreamSpec

from .api import StartAt
from .subjects import nats_partition_filter, nats_stream_name

DUPLICATE_WINDOW_S = 120.0

log = logging.getLogger(__name__)


async def create_stream(js: JetStreamContext, namespace: str, spec: StreamSpec,
                        refused: Callable[..., Exception | None]) -> None:
    """Create the stream of `spec`, or bring it to the catalogue's
    configuration; `refused(*api_subjects)` is the permission error the
    server reported for one of them, if any."""
    name = nats_stream_name(namespace, spec)
    config = stream_config(namespace, spec)
    api = f"$JS.API.STREAM.%s.{name}"
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        info = None
    except (nats.errors.Error, asyncio.TimeoutError) as exc:
        raise refused(api % "INFO") or exc
    try:
        if info is None:
            await js.add_stream(config)
        elif not same_stream_config(info.config, config):
            await js.update_stream(config)
    except (nats.errors.Error, asyncio.TimeoutError):
        denied = refused(api % "CREATE", api % "UPDATE")
        if denied is None:
            raise
        if info is None:
            raise denied from None
        # Services may create missing streams but not change existing ones:
        # keep using the stream as it is and leave the change to the admin.
        log.warning("stream %s differs from the catalogue but %s; using it as it is", name, denied)


def stream_config(namespace: str, spec: StreamSpec) -> StreamConfig:
    """The JetStream stream of a Tidal stream: file storage, limits by age
    and size (or the last message per subject for a state stream)."""
    return StreamConfig(
        name=nats_stream_name(namespace, spec),
        subjects=[nats_partition_filter(namespace, spec, None)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=0 if spec.keep_last_per_key else spec.max_age_s,
        max_msgs_per_subject=1 if spec.keep_last_per_key else -1,
        max_bytes=spec.max_bytes if spec.max_bytes is not None else -1,
        discard=DiscardPolicy.OLD,
        duplicate_window=DUPLICATE_WINDOW_S,
    )


def same_stream_config(have: StreamConfig, want: StreamConfig) -> bool:
    """Whether an existing stream already has the settings Tidal sets."""
    def close(a: float | None, b: float | None) -> bool:
        return abs((a or 0) - (b or 0)) < 1e-3
    return (sorted(have.subjects or []) == sorted(want.subjects or []) and have.retention == want.retention
            and have.storage == want.storage and have.discard == want.discard
            and (have.max_bytes or -1) == (want.max_bytes or -1)
            and (have.max_msgs_per_subject or -1) == (want.max_msgs_per_subject or -1)
            and close(have.max_age, want.max_age) and close(have.duplicate_window, want.duplicate_window))


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
