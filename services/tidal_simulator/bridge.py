"""The real bridge, connected to the simulated cluster through the kubeconfig
the simulator wrote: in this process (tests, `--bus`), or as its own
process of a `tidal_cli.stack.Stack` (`tidal simulate` on its own stack).

A starter takes the running simulator and returns how to stop what it started."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
from collections.abc import Awaitable, Callable

from tidal_clock import elapsed

Stopper = Callable[[], Awaitable[None]]
BridgeStarter = Callable[[object], Awaitable[Stopper]]
READY_TIMEOUT_S = 60.0
log = logging.getLogger(__name__)


async def in_process_bridge(sim) -> Stopper:
    """A `BridgeService` on the simulator's bus, in this event loop."""
    from tidal_bridge import BridgeService
    from tidal_bridge import BridgeSettings

    s = sim.settings
    bridge = BridgeService(BridgeSettings(
        bus_url=s.bus_url, namespace=s.namespace, cluster=s.cluster, http_host="127.0.0.1", http_port=0,
        kubeconfig=sim.kubeconfig, log_level=s.log_level, backoff_initial_s=0.05, backoff_max_s=1.0,
        api_retry_s=0.05, bind_retry_s=0.01, drain_timeout_s=2))
    task = asyncio.create_task(bridge.run(), name="bridge")
    deadline = elapsed() + READY_TIMEOUT_S
    while not bridge.ready()[0]:
        if task.done():
            task.result()
            raise RuntimeError("the bridge stopped before it was ready")
        if elapsed() > deadline:
            raise RuntimeError(f"the bridge is not ready after {READY_TIMEOUT_S:.0f} s: {bridge.ready()[1]}")
        await asyncio.sleep(0.02)

    async def stop() -> None:
        bridge.stop()
        try:
            await asyncio.wait_for(task, 30)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            task.cancel()
    return stop


def stack_bridge(stack) -> BridgeStarter:
    """The bridge as a process of `stack`, once the simulator serves its API."""
    async def start(sim) -> Stopper:
        service = await asyncio.to_thread(stack.add, "bridge", {"TIDAL_BRIDGE_KUBECONFIG": str(sim.kubeconfig)})
        await asyncio.to_thread(stack.wait_ready, READY_TIMEOUT_S, [service])

        async def stop() -> None:  # before the API server goes: no failed watch to log
            try:
                await asyncio.to_thread(stack.kill, "bridge", signal.SIGTERM)
            except subprocess.TimeoutExpired:  # its state is in the streams: a slow drain must not cost the report
                log.warning("the bridge did not stop within 20 s of SIGTERM: killed")
                await asyncio.to_thread(stack.kill, "bridge", signal.SIGKILL)
            stack.services.remove(service)  # stopped on purpose: not a service that died
        return stop
    return start
