"""Reading a stream without a group (replay, catch-up, `tidal events`): an
ephemeral unacknowledged pull consumer; following, a lost connection or a
broker restart does not end the read, a new reader resumes after the last
message read. An unacknowledged consumer never hands a message out twice,
so one lost in flight (its connection died with a killed server) would be
skipped without a word: the consumer numbers its deliveries, and a gap in
them makes a new reader resume after the last message read.

A reader fetches `read_batch` (256) messages at a time, a group member 64.
A follower reads between the turns of its service's own work: placement
its pending pods between the events of its decisions, 64 decisions each.
At 64 a fetch it read the pods only as fast as it decided them, so its
queue, and the fair-share order, held only part of a burst already sent
(bench/burst.py: pods held back behind a waiting pod of their type that
they had arrived long before; docs/performance-log.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig

from tidal_schemas.streams import StreamSpec

from .api import RawMessage, StartAt
from .membership import raise_if_cancelling
from .nats_delivery import delivery_of, raw_message
from .nats_streams import deliver_options
from .subjects import nats_partition_filter, nats_stream_name

if TYPE_CHECKING:
    from .nats_backend import NatsBackend

log = logging.getLogger(__name__)


async def read_stream(
    backend: "NatsBackend",
    spec: StreamSpec,
    start: StartAt,
    *,
    partitions: frozenset[int] | None = None,
    until: dict[int, int] | None = None,
    follow: bool = False,
    linger_s: float = 0.0,
    main_lane_only: bool = False,
    subjects: list[str] | None = None,
) -> AsyncIterator[RawMessage]:
    """`subjects`: only the messages of these subject filters (one key's,
    one cluster's: `keyed_read`), instead of the partitions'."""
    await backend.ensure_stream(spec)
    if subjects is not None:
        filters = list(subjects)
    elif partitions is None:
        filters = [nats_partition_filter(backend.namespace, spec, None, main_lane_only=main_lane_only)]
    else:
        filters = [nats_partition_filter(backend.namespace, spec, p, main_lane_only=main_lane_only)
                   for p in sorted(partitions)]
        if not filters:
            return
    limit = max(until.values()) if until else None
    last: int | None = None  # stream sequence of the last message read
    while True:
        # Following, a broker restart or a lost connection does not end the
        # read: a new reader starts right after the last message read.
        raise_if_cancelling()
        try:
            psub = await _reader(backend, spec, filters, start if last is None else StartAt.at_sequence(last + 1))
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            if not follow:
                raise
            log.warning("reading %s: %r; trying again", spec.name, exc)
            await asyncio.sleep(0.5)
            continue
        handed = None  # the consumer sequence the next delivery should have
        try:
            if not follow and (await psub.consumer_info()).num_pending == 0:
                return  # nothing there: do not wait out a fetch timeout
            while handed != -1:
                raise_if_cancelling()
                try:
                    batch = await psub.fetch(fetch_size(backend.read_batch, start, last, limit), timeout=1.0,
                                             linger=linger_s if follow else 0.0)
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
                    number = delivery_of(msg).handed
                    if handed is not None and number != handed:
                        log.warning("reading %s: deliveries %d..%d of the reader were lost in flight; reading "
                                    "again after sequence %s", spec.name, handed, number - 1, last)
                        handed = -1
                        break
                    handed = number + 1
                    raw = raw_message(msg)
                    last = raw.position
                    if until is not None and raw.position > until.get(raw.partition, 0):
                        if limit is not None and raw.position > limit:
                            return
                        continue
                    yield raw
                    if not follow and raw.pending == 0:
                        return
        finally:
            try:
                await psub.close()
            except Exception:
                pass

def fetch_size(read_batch: int, start: StartAt, last: int | None, limit: int | None) -> int:
    """Messages to ask for: `read_batch`, but a read up to sequence `limit`
    asks for no more than the sequences left (a short read, such as a few
    positions of the decision log, then takes only those from the broker)."""
    first = last + 1 if last is not None else start.sequence if start.kind == "sequence" else None
    if limit is None or first is None:
        return read_batch
    return max(1, min(read_batch, limit - first + 1))


async def _reader(backend: "NatsBackend", spec: StreamSpec, filters: list[str], start: StartAt):
    """An ephemeral, unacknowledged pull consumer over `filters` from `start`."""
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        inactive_threshold=60.0,
        **deliver_options(start),
        **({"filter_subjects": filters} if len(filters) > 1 else {"filter_subject": filters[0]}),
    )
    return await backend.puller(nats_stream_name(backend.namespace, spec), config)
