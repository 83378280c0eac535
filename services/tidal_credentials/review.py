"""The issuer's one call to the API server: create a TokenReview
(`POST /apis/authentication.k8s.io/v1/tokenreviews`) with the issuer's own
ServiceAccount token, which its Role allows `create` on tokenreviews only."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import aiohttp

from tidal_bus.node_issuer import token_review

PATH = "/apis/authentication.k8s.io/v1/tokenreviews"


class ReviewUnavailable(Exception):
    """No review could be had (the API server unreachable, or it refused the
    issuer itself): the agent may retry later."""


class TokenReviewer:
    def __init__(self, api_url: str, token_file: Path, ca_file: Path | None, timeout_s: float) -> None:
        self.url = api_url.rstrip("/") + PATH
        self.token_file = token_file
        self._tls: ssl.SSLContext | None = None
        if api_url.startswith("https://"):
            has_ca = ca_file is not None and ca_file.is_file()
            self._tls = ssl.create_default_context(cafile=str(ca_file) if has_ca else None)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def review(self, token: str, audience: str) -> dict[str, Any]:
        """The TokenReview the API server answered for `token`."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            own = self.token_file.read_text().strip()
        except OSError as exc:
            raise ReviewUnavailable(f"the issuer's own token {self.token_file}: {exc.strerror}") from None
        try:
            async with self._session.post(self.url, json=token_review(token, audience), ssl=self._tls or False,
                                          headers={"Authorization": f"Bearer {own}"}) as answer:
                body = await answer.json(content_type=None)
                if answer.status not in (200, 201):
                    message = body.get("message") if isinstance(body, dict) else None
                    raise ReviewUnavailable(f"the API server answered {answer.status} to the TokenReview: {message}")
                return body
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ReviewUnavailable(f"TokenReview failed: {type(exc).__name__} {exc}".rstrip()) from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
