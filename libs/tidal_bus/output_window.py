"""A consumer's output window: the outputs a handler publishes are not
waited for one by one. The handler returns once they are handed to the
broker connection, in the order it published them (`Backend.send`), the
next event is handled, and an event is acked (and remembered as handled)
once all its outputs are stored, in the order the events came. At most
`size` events wait so. Outputs of many events then travel together and the
broker's acks come back together: `bench/bus_read.py` (paths relay and
relay-window) measures the CPU per event either way.

An output the bus could not store within its own retries dead-letters its
event (retriable), as a handler failing for that reason would. Outputs of
one key are stored in the order they were published unless one is sent
again after a later one was stored (its ack lost or late): readers keeping
the newest per key order by the sample's time (node scores do).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tidal_schemas import Envelope

from .api import RawMessage
from .trace_context import TraceContext


class _Outputs(list):
    """The acks of one event's outputs; closed when its handler returns (a
    task it started and that publishes later waits for its own acks)."""

    open = True


# the outputs of the event being handled, when its consumer has a window
_OUTPUTS: ContextVar[_Outputs | None] = ContextVar("tidal_bus_outputs", default=None)


def deferred_outputs() -> list[asyncio.Future[Any]] | None:
    """Where `Bus.publish` leaves the acks of the event being handled for
    its consumer to wait for; None when that consumer has no window (the
    publisher waits itself)."""
    outputs = _OUTPUTS.get()
    return outputs if outputs is not None and outputs.open else None


def defer(work: asyncio.Future[Any]) -> bool:
    """Leave `work` (a task the handler started) to the consumer, as it does
    the acks of outputs: the next events are handled meanwhile, the event is
    acked once `work` is done, and dead-lettered if it failed. False when the
    consumer has no window: the handler waits for its work itself."""
    outputs = deferred_outputs()
    if outputs is None:
        return False
    outputs.append(work)
    return True


@dataclass
class Handled:
    """An event handled whose outputs may still be on their way."""

    raw: RawMessage
    seen_as: str | None  # None: skipped (another cluster's, a duplicate), nothing to remember
    envelope: Envelope[Any] | None = None
    outputs: list[asyncio.Future[Any]] = field(default_factory=list)
    trace: TraceContext | None = None

    def failure(self) -> BaseException | None:
        """Why an output was not stored (None: all were)."""
        return next((failed for o in self.outputs if (failed := o.exception()) is not None), None)


class OutputWindow:
    """Events handled, oldest first, each given to `finish` (ack it, or
    dead-letter it) once its outputs are done, by a task of its own."""

    def __init__(self, size: int, finish: Callable[[Handled], Awaitable[None]], name: str) -> None:
        if size < 1:
            raise ValueError(f"a consumer's window holds at least 1 event, not {size}")
        self.size, self._finish, self._name = size, finish, name
        self._waiting: deque[Handled] = deque()
        self._finisher: asyncio.Task[None] | None = None
        self._finished = asyncio.Condition()  # notified as each is finished

    def __len__(self) -> int:
        return len(self._waiting)

    @contextmanager
    def collecting(self) -> Iterator[list[asyncio.Future[Any]]]:
        """While the handler runs: its outputs' acks go to the list given
        (with a window of 1, nowhere: the publisher waits for each itself)."""
        outputs = _Outputs()
        token = _OUTPUTS.set(outputs if self.size > 1 else None)
        try:
            yield outputs
        finally:
            outputs.open = False
            _OUTPUTS.reset(token)

    async def add(self, handled: Handled) -> None:
        """Leave `handled` to be finished once its outputs are done; return
        when the window has room for the next event."""
        self._waiting.append(handled)
        if self._finisher is None or self._finisher.done():
            self._finisher = asyncio.create_task(self._finish_in_order(), name=f"{self._name}:acks")
        finisher = self._finisher
        if len(self._waiting) >= self.size:  # full: wait for the oldest to be finished
            async with self._finished:
                await self._finished.wait_for(lambda: len(self._waiting) < self.size or finisher.done())
        if finisher.done() and not finisher.cancelled() and finisher.exception() is not None:
            raise finisher.exception()  # an ack failed: the consumer stops, the events come back

    async def drain(self) -> None:
        """Wait until every event handled is finished."""
        while self._finisher is not None and not self._finisher.done():
            await asyncio.shield(self._finisher)

    def abandon(self) -> None:
        """Stop at once (the consumer is cancelled, like a crash): what is
        not acked comes back to the group."""
        if self._finisher is not None:
            self._finisher.cancel()
        for handled in self._waiting:
            for output in handled.outputs:
                output.cancel()

    async def _finish_in_order(self) -> None:
        while self._waiting:
            oldest = self._waiting[0]
            sending = [output for output in oldest.outputs if not output.done()]
            if sending:
                await asyncio.wait(sending)
            await self._finish(oldest)
            self._waiting.popleft()
            async with self._finished:
                self._finished.notify_all()
