"""The bridge's binds run side by side, one pod's in turn (`side_by_side`)."""

from __future__ import annotations

import asyncio

import pytest

from tidal_bridge.side_by_side import side_by_side


async def test_a_groups_items_run_in_turn_while_groups_overlap():
    log: list[tuple[str, str]] = []

    async def run(item: str) -> None:
        log.append(("start", item))
        await asyncio.sleep(0.01)
        log.append(("end", item))

    await side_by_side([["a1", "a2"], ["b1"]], run, asyncio.Semaphore(8))
    assert log.index(("end", "a1")) < log.index(("start", "a2"))  # in turn
    assert log.index(("start", "b1")) < log.index(("end", "a1"))  # side by side


async def test_no_more_than_the_limit_run_at_once():
    running, most = [0], [0]

    async def run(item: int) -> None:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0.01)
        running[0] -= 1

    await side_by_side([[i] for i in range(10)], run, asyncio.Semaphore(3))
    assert most[0] == 3


async def test_a_failure_is_raised_once_every_run_has_ended():
    ended: list[int] = []

    async def run(item: int) -> None:
        await asyncio.sleep(0.01 * item)
        if item == 1:
            raise ValueError("bind 1 failed")
        ended.append(item)

    with pytest.raises(ValueError, match="bind 1 failed"):
        await side_by_side([[1], [2], [3]], run, asyncio.Semaphore(3))
    assert sorted(ended) == [2, 3]
