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


def bound(log: list, item: str, ok: bool = True):
    async def bind() -> bool:
        log.append(("bind", item))
        await asyncio.sleep(0.01)
        return ok
    return bind


async def test_a_gated_bind_waits_until_the_one_before_in_its_gate_is_admitted():
    binds, log = BindsInFlight(8, admission_wait_s=600), []
    first = binds.start("a", bound(log, "a"), gate="gpu-node/2000")
    second = binds.start("b", bound(log, "b"), gate="gpu-node/2000")
    other_size = binds.start("c", bound(log, "c"), gate="gpu-node/1000")
    ungated = binds.start("d", bound(log, "d"))
    await asyncio.gather(first, other_size, ungated)
    await asyncio.sleep(0.05)
    assert ("bind", "b") not in log and not second.done()  # a is bound, its kubelet has not admitted it
    assert {("bind", "a"), ("bind", "c"), ("bind", "d")} <= set(log)
    binds.admitted("a")
    await asyncio.wait_for(second, 60)
    assert log[-1] == ("bind", "b")


async def test_a_failed_bind_or_an_admission_seen_early_does_not_hold_the_gate():
    binds, log = BindsInFlight(8, admission_wait_s=600), []
    failed = binds.start("a", bound(log, "a", ok=False), gate="n/1000")
    after_failure = binds.start("b", bound(log, "b"), gate="n/1000")
    binds.admitted("b")  # the kubelet's admission was watched before the bind call returned
    then = binds.start("c", bound(log, "c"), gate="n/1000")
    await asyncio.wait_for(asyncio.gather(failed, after_failure, then), 60)  # nobody waits the 600 s
    items = [item for _, item in log]
    assert sorted(items) == ["a", "b", "c"] and items[0] == "a"


async def test_a_kubelet_that_never_admits_holds_the_gate_only_for_the_admission_wait(caplog):
    binds, log = BindsInFlight(8, admission_wait_s=0.2), []
    first = binds.start("a", bound(log, "a"), gate="n/1000")
    second = binds.start("b", bound(log, "b"), gate="n/1000")
    await asyncio.wait_for(asyncio.gather(first, second), 60)
    assert [item for _, item in log] == ["a", "b"]
    assert "has not been admitted by its kubelet" in caplog.text
