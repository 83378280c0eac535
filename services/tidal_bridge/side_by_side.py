"""Work run side by side, some of it in turn: the bridge binds many pods at
once (each bind is several API round trips), one pod's decisions one after
another, in their log order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

Item = TypeVar("Item")


async def side_by_side(groups: Iterable[list[Item]], run: Callable[[Item], Awaitable[None]],
                       limit: asyncio.Semaphore) -> None:
    """`run` every item: a group's items in turn, the groups at the same
    time, at most `limit` runs at once. Returns once every run has ended,
    raising then the first failure, if any: no run is left going unwatched."""
    async def in_turn(items: list[Item]) -> None:
        for item in items:
            async with limit:
                await run(item)

    ended = await asyncio.gather(*(in_turn(group) for group in groups), return_exceptions=True)
    for outcome in ended:
        if isinstance(outcome, BaseException):
            raise outcome
