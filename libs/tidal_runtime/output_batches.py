"""Outputs of many handled events published as one event per (cluster,
stream partition): a stage answering every sample (scoring's node scores,
oversell's allocatable; `tidal_schemas.node_batch`) sends one event for
the samples it has in hand, not one each.

An item joins its partition's open batch. The open batches go out when
the first of them has waited `linger_s` (0: when the event loop next runs
what is ready, which is when the consumer has handled what it had fetched
and waits: what one fetch brought travels together), when they hold the
items of `flush_at` events, and a batch alone when it is full. Samples come
as a stream, a node at a time (every node once a period, each at its own
moment), so without a linger a fetch brings one or two and every batch
holds a node or two: each then costs its publish, its reading by every
stage after, and the broker's work for each, per sample. `flush_at` is set
to the consumer's output window, so that a window never waits for a timer.

The events whose items a batch holds are acked once it is stored (their
consumer's output window holds the batch's future,
`tidal_bus.output_window`); a handler without a window waits for it
itself, and its batch goes out without lingering. Batches of one
partition are published one after the other, in the order they were
filled.

A batch's id derives from every cause's id: a batch sent again keeps its
id and the broker keeps one copy. After a crash its causes come back and
may be grouped otherwise, so a reader can see a node's figures twice, as
after any output sent again (`tidal_bus.output_window`): score readers keep
the newest sample's, and a node's allocatable is replaced by its next
sample's.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tidal_bus.output_window import deferred_outputs
from tidal_schemas import Envelope, derived_id
from tidal_schemas.node_batch import MAX_ITEMS, NodeBatch
from tidal_schemas.streams import partition_for, stream

T = TypeVar("T")
Group = tuple[str, int]  # (cluster, partition)


@dataclass
class _Batch(Generic[T]):
    done: asyncio.Future[None]
    items: list[T] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)


class OutputBatches(Generic[T]):
    """Items gathered into `batch` events (a `NodeBatch` type: its stream,
    its items), at most `max_items` each, published by `publish(payload,
    cluster=, event_id=)` (a service's `publish`)."""

    def __init__(self, batch: type[NodeBatch[T]], publish: Callable[..., Awaitable[Any]], *,
                 max_items: int = MAX_ITEMS, linger_s: float = 0.0, flush_at: int | None = None):
        if not 1 <= max_items <= MAX_ITEMS:
            raise ValueError(f"a batch holds at least 1 item and at most {MAX_ITEMS}, not {max_items}")
        if linger_s < 0 or (flush_at is not None and flush_at < 1):
            raise ValueError(f"linger_s must be >= 0 and flush_at >= 1, not {linger_s} and {flush_at}")
        self.batch, self.publish, self.max_items = batch, publish, max_items
        self.linger_s, self.flush_at = linger_s, flush_at
        self.partitions = stream(batch.TYPE).partitions
        self._open: dict[Group, _Batch[T]] = {}
        self._held = 0  # causes in the open batches
        self._sending: dict[Group, asyncio.Task[None]] = {}
        self._flush: asyncio.Handle | None = None  # the open batches' send, when one is due
        self._flush_at = 0.0  # loop time it is due at

    async def add(self, item: T, *, key: str, cause: Envelope[Any]) -> None:
        """Add `item`, an output of `cause` about `key`, to its partition's
        batch; return once the batch is stored when no output window waits
        for it."""
        group = (cause.cluster, partition_for(key, self.partitions))
        batch = self._open.get(group)
        if batch is None:
            batch = self._open[group] = _Batch(asyncio.get_running_loop().create_future())
        batch.items.append(item)
        batch.causes.append(cause.id)
        self._held += 1
        outputs = deferred_outputs()
        if self.flush_at is not None and self._held >= self.flush_at:
            self._send_all()
        elif len(batch.items) >= self.max_items:
            self._send(group)
        else:  # a handler that waits for its batch itself is not kept waiting for the linger
            self._due(self.linger_s if outputs is not None else 0.0)
        if outputs is not None:
            outputs.append(batch.done)
        else:
            await asyncio.shield(batch.done)

    def _due(self, linger_s: float) -> None:
        """Send the open batches in `linger_s` (0: when the event loop next
        runs what is ready), unless they are due sooner."""
        loop = asyncio.get_running_loop()
        at = loop.time() + linger_s
        if self._flush is not None:
            if self._flush_at <= at:
                return
            self._flush.cancel()
        self._flush_at = at
        # in a context of its own: the handler's holds its event's outputs
        self._flush = loop.call_soon(self._send_all, context=contextvars.Context()) if not linger_s \
            else loop.call_at(at, self._send_all, context=contextvars.Context())

    def _send_all(self) -> None:
        if self._flush is not None:
            self._flush.cancel()  # when sent before it was due
            self._flush = None
        for group in list(self._open):
            self._send(group)

    def _send(self, group: Group) -> None:
        batch = self._open.pop(group)
        self._held -= len(batch.causes)
        task = asyncio.get_running_loop().create_task(self._publish(group, batch, self._sending.get(group)),
                                                      context=contextvars.Context())
        self._sending[group] = task

    async def _publish(self, group: Group, batch: _Batch[T], before: asyncio.Task[None] | None) -> None:
        try:
            if before is not None:
                await asyncio.wait([before])  # a partition's batches go out in order
            payload = self.batch(items=batch.items)
            event_id = derived_id("+".join(batch.causes), payload.TYPE, payload.event_key(), "batch")
            await self.publish(payload, cluster=group[0], event_id=event_id)
        except asyncio.CancelledError:
            batch.done.cancel()
            raise
        except Exception as exc:
            if not batch.done.done():
                batch.done.set_exception(exc)
        else:
            if not batch.done.done():
                batch.done.set_result(None)
        finally:
            if self._sending.get(group) is asyncio.current_task():
                del self._sending[group]
