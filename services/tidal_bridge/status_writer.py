"""Status writes to Tidal's custom resources, rate-limited per object.

`put(plural, name, patch)` merges a status merge-patch into what is pending
for that object; `run()` sends each object's pending patch (PATCH
…/status) as soon as the object's last write is `interval_s` old, so
however often usage or scores change, an object is written at most once
per interval, with the latest values (the first write is immediate).

An object that does not exist (404) is created first when `put` was given
a body to create it with (a user's `FairShare`), else its patch is dropped
(a `Tenant` deleted meanwhile). A failing API server keeps the patch
pending for the next interval; nothing is lost but intermediate values.
A patch the schema refuses (422) is a bug here: logged, not retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tidal_clock import elapsed

from .errors import BridgeError, KubeStatusError
from .kube import Kube

log = logging.getLogger("tidal.bridge.status")


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Two merge patches as one (the later wins field by field; lists whole)."""
    out = dict(base)
    for key, value in patch.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class StatusWriter:
    """Pending status patches by (plural, name), written by `run()`."""

    def __init__(self, kube: Kube, interval_s: float, clock: Callable[[], float] = elapsed) -> None:
        self.kube, self.interval_s, self.clock = kube, interval_s, clock
        self.pending: dict[tuple[str, str], dict[str, Any]] = {}
        self.create: dict[tuple[str, str], dict[str, Any]] = {}
        self.last: dict[tuple[str, str], float] = {}
        self.writes = 0
        self.wake = asyncio.Event()

    def put(self, plural: str, name: str, patch: dict[str, Any], create: dict[str, Any] | None = None) -> None:
        key = (plural, name)
        self.pending[key] = merged(self.pending.get(key, {}), patch)
        if create is not None:
            self.create[key] = create
        self.wake.set()

    def forget(self, plural: str, name: str) -> None:
        """Drop what is pending for an object that is gone."""
        self.pending.pop((plural, name), None)
        self.last.pop((plural, name), None)

    def due(self, key: tuple[str, str], now: float) -> float:
        """Seconds until the object may be written again (≤ 0: now)."""
        return self.last.get(key, -float("inf")) + self.interval_s - now

    async def run(self) -> None:
        while True:
            self.wake.clear()  # before the writes: a put while one is awaited must wake the next round
            now = self.clock()
            waits = []
            for key in list(self.pending):
                left = self.due(key, now)
                if left > 0:
                    waits.append(left)
                    continue
                await self._write(key)
                if key in self.pending:  # failed: try again in an interval
                    waits.append(self.interval_s)
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=min(waits, default=None))
            except asyncio.TimeoutError:
                pass

    async def _write(self, key: tuple[str, str]) -> None:
        plural, name = key
        patch = self.pending.pop(key)
        self.last[key] = self.clock()
        try:
            try:
                await self.kube.patch_custom_status(plural, name, {"status": patch})
            except KubeStatusError as exc:
                if exc.code != 404 or key not in self.create:
                    raise
                await self.kube.create_custom(plural, self.create[key])
                await self.kube.patch_custom_status(plural, name, {"status": patch})
            self.writes += 1
        except KubeStatusError as exc:
            if exc.code == 404:
                log.info("%s %s is gone: status not written", plural, name)
                self.create.pop(key, None)
                return
            if exc.code == 422:  # the patch itself is refused: sending it again would not help
                log.error("status of %s %s refused: %s", plural, name, exc)
                return
            log.warning("status of %s %s not written: %s", plural, name, exc)
            self._keep(key, patch)
        except BridgeError as exc:
            log.warning("status of %s %s not written: %s", plural, name, exc)
            self._keep(key, patch)

    def _keep(self, key: tuple[str, str], patch: dict[str, Any]) -> None:
        # values put while this write was failing are newer: they win
        self.pending[key] = merged(patch, self.pending.get(key, {}))
