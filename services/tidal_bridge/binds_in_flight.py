"""Binds in flight. A bind waits for API round trips (the Binding, its
Scheduled Event), so the bridge binds many pods at once: up to `limit` at a
time, one pod's decisions one after another in their log order (side by
side, the second's Binding could reach the API server first).
The decision stream's consumer reads on meanwhile: each event is
acknowledged once its binds are done (`tidal_bus.defer`). Whatever else is
done about a pod with a bind in flight waits its turn the same way (a
pending decision read after the bind must not mark the pod unschedulable
once it is bound)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class BindsInFlight:
    def __init__(self, limit: int) -> None:
        self._limit = asyncio.Semaphore(limit)
        self._last: dict[str, asyncio.Task[None]] = {}  # pod -> its latest bind

    def start(self, pod: str, bind: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run `bind` once the pod's binds started before it have ended
        (whatever became of them) and a place is free."""
        before = self._last.get(pod)

        async def in_turn() -> None:
            if before is not None:
                await asyncio.wait([before])
            async with self._limit:
                await bind()

        task = asyncio.get_running_loop().create_task(in_turn(), name=f"bind {pod}")
        self._last[pod] = task
        task.add_done_callback(lambda ended: self._forget(pod, ended))
        return task

    def busy(self, pod: str) -> bool:
        """Whether a bind of `pod` is in flight (or waiting its turn)."""
        return pod in self._last

    def _forget(self, pod: str, ended: asyncio.Task[None]) -> None:
        if self._last.get(pod) is ended:
            del self._last[pod]
