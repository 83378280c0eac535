"""The credential issuer's HTTP endpoint, a thin adapter over
tidal_bus.node_issuer:

    POST /v1/node-credentials   Authorization: Bearer <projected token>, {"publicKey": "U…"}
        200 {"jwt", "user", "node", "expires"}; 400, 401, 403 {"reason"}; 503 review unavailable
    GET  /healthz, /metrics (tidal_credentials_requests_total{code})

Every refusal is logged with its reason and the pod the token named, never
the token. It holds the account signing key only (a constant-size Secret):
no node is listed anywhere, a node that joins just asks.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest

from tidal_bus.nats_permissions import topology_user
from tidal_bus.node_issuer import Verdict, bearer_token, check_request, expiry, judge, node_user_jwt, \
    service_account_user
from tidal_clock import Clock, wall_clock

from .review import ReviewUnavailable, TokenReviewer
from .settings import CredentialsSettings

log = logging.getLogger("tidal.credentials")
MAX_BODY = 4096


class CredentialIssuer:
    """`async with CredentialIssuer(settings)`, then agents POST to `url`."""

    def __init__(self, settings: CredentialsSettings, *, clock: Clock = wall_clock) -> None:
        self.settings, self.clock = settings, clock
        self.signing_seed = settings.signing_seed()
        self.agent = service_account_user(*settings.agent_service_account.split(":"))
        self.reviewer = TokenReviewer(settings.kube_api_url, settings.kube_token_file, settings.kube_ca_file,
                                      settings.review_timeout_s)
        self.registry = CollectorRegistry()
        self.answers = Counter("tidal_credentials_requests_total", "Node credential requests answered, by HTTP "
                               "code (200 issued; 400, 401, 403 refused; 503 no review)", ["code"],
                               registry=self.registry)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def issue(self, request: web.Request) -> web.Response:
        token = bearer_token(request.headers.get("Authorization"))
        try:
            body: Any = orjson.loads(await request.content.read(MAX_BODY))
        except orjson.JSONDecodeError:
            body = None
        public = body.get("publicKey") if isinstance(body, dict) else None
        verdict = check_request(token, public)
        if verdict is None:
            assert token is not None and isinstance(public, str)
            try:
                verdict = judge(await self.reviewer.review(token, self.settings.audience),
                                service_account=self.agent, audience=self.settings.audience)
            except ReviewUnavailable as exc:
                verdict = Verdict(503, str(exc))
        self.answers.labels(str(verdict.code)).inc()
        if not verdict.granted:
            log.warning("node credentials refused (%d) to %s: %s", verdict.code, request.remote, verdict.reason)
            return web.json_response({"reason": verdict.reason}, status=verdict.code)
        assert verdict.node is not None and isinstance(public, str)
        now = int(self.clock())
        exp = expiry(now, self.settings.ttl_s)
        jwt = node_user_jwt(self.signing_seed, str(self.settings.account), public, verdict.node,
                            namespace=self.settings.namespace, cluster=self.settings.cluster, iat=now, exp=exp)
        log.info("node credentials issued for %s (pod %s), valid %ds", verdict.node, verdict.pod, self.settings.ttl_s)
        return web.json_response({"jwt": jwt, "user": topology_user(verdict.node), "node": verdict.node,
                                  "expires": exp})

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> "CredentialIssuer":
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/node-credentials", self.issue)
        app.router.add_get("/healthz", _healthz)
        app.router.add_get("/metrics", self._metrics)
        tls = None
        if self.settings.tls_cert_file is not None:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(str(self.settings.tls_cert_file), str(self.settings.tls_key_file))
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.http_host, self.settings.http_port, ssl_context=tls)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        host = "127.0.0.1" if self.settings.http_host in ("0.0.0.0", "") else self.settings.http_host
        self.url = f"{'https' if tls else 'http'}://{host}:{port}/v1/node-credentials"
        return self

    async def stop(self) -> None:
        await self.reviewer.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> "CredentialIssuer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _healthz(_request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def main() -> int:
    """Serve until SIGTERM or SIGINT; 2 on a bad setting."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = CredentialsSettings()
        issuer = CredentialIssuer(settings)
    except ValueError as exc:  # pydantic's ValidationError is one
        log.error("credential issuer cannot start: %s", exc)
        return 2

    async def serve() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        async with issuer:
            log.info("issuing node agents' bus credentials at %s for %s", issuer.url, issuer.agent)
            await stop.wait()

    asyncio.run(serve())
    return 0
