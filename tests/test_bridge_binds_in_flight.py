"""The bridge's binds in flight (`BindsInFlight`): side by side up to a
limit, one pod's in the order they were started."""

from __future__ import annotations

import asyncio

from tidal_bridge.binds_in_flight import BindsInFlight


def logged(log: list, item: str, seconds: float = 0.01, fail: bool = False):
    async def bind() -> None:
        log.append(("start", item))
        await asyncio.sleep(seconds)
        log.append(("end", item))
        if fail:
            raise RuntimeError(f"{item} failed")
    return bind


async def test_one_pods_binds_run_in_turn_while_other_pods_overlap():
    binds, log = BindsInFlight(8), []
    started = [binds.start("a", logged(log, "a1", fail=True)), binds.start("a", logged(log, "a2")),
               binds.start("b", logged(log, "b1"))]
    assert binds.busy("a") and binds.busy("b")
    await asyncio.gather(*started, return_exceptions=True)
    assert log.index(("end", "a1")) < log.index(("start", "a2"))  # in turn, after a failed one too
    assert log.index(("start", "b1")) < log.index(("end", "a1"))  # side by side
    assert not binds.busy("a") and not binds.busy("b")  # forgotten once done


async def test_no_more_than_the_limit_run_at_once():
    binds, running, most = BindsInFlight(3), [0], [0]

    async def bind() -> None:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0.01)
        running[0] -= 1

    await asyncio.gather(*(binds.start(f"pod-{i}", bind) for i in range(10)))
    assert most[0] == 3
