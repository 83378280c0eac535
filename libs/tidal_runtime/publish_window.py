"""Publishes in flight together.

Each publish waits for the broker's acknowledgement (JetStream stores the
event before it answers). A loop that awaits every publish in turn spends a
round trip per event, and writes to the socket once per event; a window of
publishes in flight shares the round trip and the writes. Publishes start
in the order they are added, so events of one key keep their order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


class PublishWindow:
    """`async with PublishWindow(size) as window: await window.add(publish(…))`:
    at most `size` in flight; `add` waits for the whole window when it is
    full, and leaving the block waits for the rest. The first failure is
    raised (after every publish of its window has finished); leaving on an
    error or a cancellation cancels what is still in flight."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a publish window holds at least 1, not {size}")
        self.size = size
        self._tasks: list[asyncio.Future[Any]] = []

    async def __aenter__(self) -> PublishWindow:
        return self

    async def __aexit__(self, kind, error, traceback) -> None:
        if error is None:
            await self.flush()
            return
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def add(self, publish: Awaitable[Any]) -> bool:
        """Start `publish`; True when the window was full and has been
        waited for (a moment to look around: the caller's state may have
        moved while it waited)."""
        self._tasks.append(asyncio.ensure_future(publish))
        if len(self._tasks) < self.size:
            return False
        await self.flush()
        return True

    async def flush(self) -> None:
        tasks, self._tasks = self._tasks, []
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise
        for result in results:
            if isinstance(result, BaseException):
                raise result
