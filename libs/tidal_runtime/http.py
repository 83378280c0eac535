"""The HTTP endpoint every service serves: /healthz, /readyz, /metrics."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST


class HealthServer:
    """Liveness = the process answers; readiness = `ready()` says so (bus
    connected, consumers joined)."""

    def __init__(self, host: str, port: int, ready: Callable[[], tuple[bool, str]],
                 metrics: Callable[[], bytes]) -> None:
        self._host, self._port = host, port
        self._ready, self._metrics = ready, metrics
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_view)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the real port when 0 was asked

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        ok, why = self._ready()
        return web.json_response({"ready": ok, "reason": why}, status=200 if ok else 503)

    async def _metrics_view(self, request: web.Request) -> web.Response:
        return web.Response(body=self._metrics(), headers={"Content-Type": CONTENT_TYPE_LATEST})
