"""Binds in flight. A bind waits for an API round trip (the Binding; its
Scheduled Event is written behind it), so the bridge binds many pods at once: up to `limit` at a
time, one pod's decisions one after another in their log order (side by
side, the second's Binding could reach the API server first).
The decision stream's consumer reads on meanwhile: each event is
acknowledged once its binds are done (`tidal_bus.defer`). Whatever else is
done about a pod with a bind in flight waits its turn the same way (a
pending decision read after the bind must not mark the pod unschedulable
once it is bound).

**GPU pods of one size on one node go one at a time** (a `gate`, the node and
the milli-GPUs asked). The kubelet tells the device plugin nothing of the pod
it admits, only how many units a container asks, so the plugin matches the
call to the oldest waiting decision of that size (services/tidal_topology/
gpu_ledger.py). That is right only while one such pod at a time is bound and
not yet admitted: two bound side by side reach the kubelet in either order
(and a kubelet sorts the pods of one watch batch by creation time). So a gated
bind waits until the one before it in the gate was admitted by its kubelet
(the pod has `status.startTime` or has ended, `admitted`), failed to bind, or
`admission_wait_s` passed (a kubelet that is down must not stop the node's GPU
binds for good). Pods of other sizes, and pods without GPUs, are not held.
This is the node lock HAMi and Volcano take for shared devices, kept in the
bridge because it is the one reader of the totally ordered decision log.

`running` binds hold one of the `limit` places; `waiting` ones wait for
their pod's bind before them, their gate, or a place (the bridge's
`tidal_bridge_binds_in_flight{state}`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any


class BindsInFlight:
    def __init__(self, limit: int, admission_wait_s: float = 60.0, log: logging.Logger | None = None) -> None:
        self._limit = asyncio.Semaphore(limit)
        self._last: dict[str, asyncio.Task[None]] = {}  # pod -> its latest bind
        self._gates: dict[str, asyncio.Future[None]] = {}  # gate -> the turn of its latest bind
        self._turns: dict[str, tuple[str, asyncio.Future[None]]] = {}  # pod -> (gate, its turn), until admitted
        self._waiting: set[asyncio.Task[None]] = set()  # started, not yet holding a place
        self.running = 0  # holding a place
        self.admission_wait_s = admission_wait_s
        self.log = log or logging.getLogger("tidal.bridge")

    def start(self, pod: str, bind: Callable[[], Awaitable[Any]], gate: str | None = None) -> asyncio.Task[None]:
        """Run `bind` once the pod's binds started before it have ended
        (whatever became of them), the bind before it in `gate` was admitted
        (see the module docstring), and a place is free. A true result of
        `bind` means it bound: the gate is then held until `admitted(pod)`."""
        loop = asyncio.get_running_loop()
        before = self._last.get(pod)
        ahead, turn = None, None
        if gate is not None:
            ahead, turn = self._gates.get(gate), loop.create_future()
            self._gates[gate], self._turns[pod] = turn, (gate, turn)

        async def in_turn() -> None:
            bound = False
            try:
                if before is not None:
                    await asyncio.wait([before])
                if ahead is not None:
                    await asyncio.wait([ahead])
                async with self._limit:
                    self._waiting.discard(asyncio.current_task())  # type: ignore[arg-type]
                    self.running += 1
                    try:
                        bound = bool(await bind())
                    finally:
                        self.running -= 1
            finally:
                if gate is not None and turn is not None:
                    if bound and not turn.done():
                        loop.call_later(self.admission_wait_s, self._not_admitted, pod, gate, turn)
                    else:
                        self._release(pod, gate, turn)

        task = loop.create_task(in_turn(), name=f"bind {pod}")
        self._last[pod] = task
        self._waiting.add(task)
        task.add_done_callback(lambda ended: self._forget(pod, ended))
        return task

    @property
    def waiting(self) -> int:
        """Binds started that do not hold a place yet."""
        return len(self._waiting)

    def busy(self, pod: str) -> bool:
        """Whether a bind of `pod` is in flight (or waiting its turn)."""
        return pod in self._last

    def admitted(self, pod: str) -> None:
        """The pod's kubelet has admitted it (or it is gone): the next bind of its gate may go."""
        if pod in self._turns:
            self._release(pod, *self._turns[pod])

    def _not_admitted(self, pod: str, gate: str, turn: asyncio.Future[None]) -> None:
        if not turn.done():
            self.log.warning("pod %s has not been admitted by its kubelet %.0f s after its bind: the next GPU pod "
                             "of %s binds now, and the node's device plugin may hand either its devices",
                             pod, self.admission_wait_s, gate)
        self._release(pod, gate, turn)

    def _release(self, pod: str, gate: str, turn: asyncio.Future[None]) -> None:
        if not turn.done():
            turn.set_result(None)
        if self._turns.get(pod, (None, None))[1] is turn:
            del self._turns[pod]
        if self._gates.get(gate) is turn:
            del self._gates[gate]

    def _forget(self, pod: str, ended: asyncio.Task[None]) -> None:
        self._waiting.discard(ended)
        if self._last.get(pod) is ended:
            del self._last[pod]
