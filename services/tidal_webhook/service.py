"""The admission webhook service: an HTTPS endpoint for AdmissionReviews of
nodes/status updates, answered from the newest `node.allocatable` of each
node (`figures.py`, `answer.py`, `patch.py`).

Every replica reads `node.allocatable` whole, without a consumer group,
from `max_age_s` ago (older figures are never written) and then follows it:
replicas are interchangeable behind the Service. It is ready once that
backlog is read; until then every review passes unchanged. The certificate
files are read again when they change (cert-manager renews in place).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web
from prometheus_client import Counter, Gauge

from tidal_bus import StartAt
from tidal_clock import Clock, now_utc, wall_clock
from tidal_runtime import Service

from .answer import answer
from .figures import NewestAllocatable
from .review import MAX_BODY, ReviewError, read_review, response
from .settings import WebhookSettings

STREAM = "node.allocatable"


class WebhookService(Service):
    name = "webhook"
    settings_class = WebhookSettings

    def __init__(self, settings: WebhookSettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.settings: WebhookSettings
        self.figures = NewestAllocatable(self.settings.cluster, self.settings.max_age_s)
        self.clock: Clock = wall_clock  # how old a figure is, and so from when the figures are read
        self.caught_up = asyncio.Event()
        registry = self.metrics.registry
        self.reviews = Counter("tidal_webhook_reviews_total", "AdmissionReviews answered, by outcome "
                               "(patched, unchanged, malformed, failed)", ["outcome"], registry=registry)
        Gauge("tidal_webhook_nodes_known", "Nodes whose oversold allocatable is held",
              registry=registry).set_function(lambda: len(self.figures.held))
        self.https_port: int | None = None
        self._runner: web.AppRunner | None = None
        self._tls: ssl.SSLContext | None = None
        self._tls_stamp: tuple[float, float] | None = None

    def loops(self):
        return [self.follow_allocatable, self.reload_certificate]

    def ready(self) -> tuple[bool, str]:
        ok, why = super().ready()
        if ok and not self.caught_up.is_set():
            return False, f"reading {STREAM}"
        if ok and self._runner is None:
            return False, "HTTPS endpoint not serving"
        return ok, why

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            await self._close_https()

    async def on_start(self) -> None:
        cert, key = self.settings.require_tls()
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.minimum_version = ssl.TLSVersion.TLSv1_2
        self._tls.load_cert_chain(cert, key)
        self._tls_stamp = self._stamp()
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(self.settings.path, self.review)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, handle_signals=False, access_log=None)
        await self._runner.setup()
        if self.settings.https_fd is not None:  # a socket already listening, handed down
            site: web.BaseSite = web.SockSite(self._runner, socket.socket(fileno=self.settings.https_fd),
                                              ssl_context=self._tls)
        else:
            site = web.TCPSite(self._runner, self.settings.https_host, self.settings.https_port,
                               ssl_context=self._tls)
        await site.start()
        self.https_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.log.info("serving AdmissionReviews on port %s at %s", self.https_port, self.settings.path)

    async def on_stop(self) -> None:
        await self._close_https()

    async def _close_https(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- the figures --------------------------------------------------------------
    async def follow_allocatable(self) -> None:
        began = now_utc(self.clock)
        last_stored: datetime | None = None
        async for raw, event in self.bus.read(STREAM, StartAt.at_time(began - self.figures.max_age)):
            self._take(event)
            last_stored = raw.stored_at or last_stored
        self.caught_up.set()
        self.log.info("read %s: %d nodes known", STREAM, len(self.figures.held))
        # from the last one read (or the start of the read): a few read twice, newest wins
        resume = (last_stored or began) - timedelta(seconds=1)
        async for _raw, event in self.bus.read(STREAM, StartAt.at_time(resume), follow=True,
                                               linger_s=self.settings.input_linger_s):
            self._take(event)

    def _take(self, event: Any) -> None:
        if isinstance(event, Exception):  # refused at intake (tidal_bus.intake): nothing to keep
            return
        self.figures.take(event)

    # -- the endpoint ---------------------------------------------------------------
    async def review(self, request: web.Request) -> web.StreamResponse:
        """POST of an AdmissionReview: always allowed, patched when a figure applies."""
        try:
            body = await request.read()
            found = read_review(body)
        except ReviewError as exc:
            self.reviews.labels("malformed").inc()
            self.log.warning("malformed AdmissionReview: %s", exc)
            return web.json_response(response(exc.uid, f"malformed AdmissionReview: {exc}", code=400), status=400)
        except web.HTTPException:
            raise
        try:
            if self.caught_up.is_set():
                granted, why_not = self.figures.lookup(found.name, now_utc(self.clock))
            else:
                granted, why_not = None, f"still reading {STREAM}"
            result = answer(found, granted, why_not, max_factor=self.settings.max_factor,
                            kubelet_only=self.settings.kubelet_only)
        except Exception as exc:  # a bug: say so, and let the update through unchanged
            self.reviews.labels("failed").inc()
            self.log.exception("review %s of node %s failed", found.uid, found.name)
            return web.json_response(response(found.uid, f"webhook error: {type(exc).__name__}", code=500))
        self.reviews.labels("patched" if result.ops else "unchanged").inc()
        if self.log.isEnabledFor(logging.DEBUG):
            self.log.debug("node %s by %s: %s", found.name, found.username, result.reason)
        return web.json_response(response(found.uid, result.reason, result.ops))

    # -- the certificate ------------------------------------------------------------
    def _stamp(self) -> tuple[float, float]:
        cert, key = self.settings.require_tls()
        return cert.stat().st_mtime, key.stat().st_mtime

    async def reload_certificate(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tls_reload_s)
            try:
                stamp = self._stamp()
                if stamp != self._tls_stamp and self._tls is not None:
                    self._tls.load_cert_chain(*self.settings.require_tls())  # new handshakes use it
                    self._tls_stamp = stamp
                    self.log.info("serving certificate reloaded")
            except (OSError, ssl.SSLError) as exc:  # mid-rotation: the old one stays until both files agree
                self.log.warning("serving certificate not reloaded: %r", exc)
