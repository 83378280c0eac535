"""PublishWindow: publishes in flight together, in order, failures raised."""

from __future__ import annotations

import asyncio

import pytest

from tidal_runtime import PublishWindow


async def _publish(log: list, name: str, delay: float, fail: bool = False) -> str:
    log.append(("start", name))
    await asyncio.sleep(delay)
    if fail:
        raise RuntimeError(f"{name} refused")
    log.append(("acked", name))
    return name


async def test_publishes_start_in_order_and_share_the_wait():
    log: list = []
    async with PublishWindow(3) as window:
        assert await window.add(_publish(log, "a", 0.05)) is False
        assert await window.add(_publish(log, "b", 0.01)) is False
        assert log == []  # started, not yet run: the caller goes on deciding
        assert await window.add(_publish(log, "c", 0.03)) is True  # full: waited for all three
        assert [e for e in log if e[0] == "start"] == [("start", "a"), ("start", "b"), ("start", "c")]
        assert {n for kind, n in log if kind == "acked"} == {"a", "b", "c"}
        await window.add(_publish(log, "d", 0.01))
    assert ("acked", "d") in log  # leaving the block waits for the rest


async def test_the_first_failure_is_raised_after_its_window_finished():
    log: list = []
    with pytest.raises(RuntimeError, match="b refused"):
        async with PublishWindow(4) as window:
            await window.add(_publish(log, "a", 0.02))
            await window.add(_publish(log, "b", 0.0, fail=True))
            await window.add(_publish(log, "c", 0.03))
    assert ("acked", "a") in log and ("acked", "c") in log  # nothing left half-sent


async def test_leaving_on_an_error_cancels_what_is_in_flight():
    log: list = []
    with pytest.raises(KeyError):
        async with PublishWindow(8) as window:
            await window.add(_publish(log, "slow", 5.0))
            await asyncio.sleep(0)
            raise KeyError("the caller failed")
    assert ("acked", "slow") not in log


def test_a_window_holds_at_least_one():
    with pytest.raises(ValueError, match="at least 1"):
        PublishWindow(0)
