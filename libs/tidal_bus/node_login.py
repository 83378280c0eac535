"""A node agent's NATS credentials, obtained at run time from the credential
issuer (`tidal_credentials`) with the agent's projected ServiceAccount token,
and renewed before they expire.

The agent makes its own nkey pair here; only the public key is sent, and the
seed is written only into the `.creds` file (mode 0600, on the pod's memory
volume) that nats-py reads at each connect. Renewing writes the new JWT into
the same file and logs in again (`NatsBackend.reconnect`), before the server
would close the connection at the old JWT's expiry. The token file is read
anew for each request: the kubelet rotates it.

    POST {url}  Authorization: Bearer <token>  {"publicKey": "U…"}
    200 {"jwt": "…", "user": "topology-<node>", "node": "<node>", "expires": <unix s>}
    400 / 401 / 403 {"reason": "…"}     refused: retrying with the same token cannot help
    503 {"reason": "…"}                  the issuer could not review the token now
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson

from tidal_clock import Clock, wall_clock

from .errors import BusError
from .nats_jwt import Creds, decode_claims
from .nkey import new_user_key
from .node_issuer import renew_at

MAX_ANSWER_BYTES = 64 * 1024
log = logging.getLogger(__name__)


class LoginError(BusError):
    """The issuer did not give credentials; `retriable` False when it
    refused (its HTTP code and reason are in the message)."""

    def __init__(self, message: str, *, retriable: bool, code: int | None = None) -> None:
        super().__init__(message)
        self.retriable, self.code = retriable, code


class NodeLogin:
    """Credentials of one node agent: `await obtain()` writes `creds_file`;
    `await keep_renewed(reconnect)` renews them for as long as it runs."""

    def __init__(self, url: str, token_file: Path | str, creds_file: Path | str, *, ca_file: str | None = None,
                 clock: Clock = wall_clock, timeout_s: float = 10.0) -> None:
        self.url, self.token_file, self.creds_file = url, Path(token_file), Path(creds_file)
        self.clock, self.timeout_s = clock, timeout_s
        self._tls = ssl.create_default_context(cafile=ca_file) if url.startswith("https://") else None
        self.seed, self.public_key = new_user_key()
        self.issued_at: float | None = None
        self.expires: float | None = None
        self.user: str | None = None

    def _ask(self) -> dict:
        """One request to the issuer (blocking: run in a thread)."""
        try:
            token = self.token_file.read_text().strip()
        except OSError as exc:
            raise LoginError(f"cannot read the ServiceAccount token {self.token_file}: {exc.strerror}",
                             retriable=True) from None
        request = urllib.request.Request(self.url, data=orjson.dumps({"publicKey": self.public_key}), method="POST",
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._tls) as answer:
                return orjson.loads(answer.read(MAX_ANSWER_BYTES))
        except urllib.error.HTTPError as exc:
            try:
                reason = str(orjson.loads(exc.read(MAX_ANSWER_BYTES)).get("reason"))
            except (orjson.JSONDecodeError, AttributeError):
                reason = exc.reason
            raise LoginError(f"the credential issuer {self.url} answered {exc.code}: {reason}",
                             retriable=exc.code >= 500 or exc.code == 429, code=exc.code) from None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise LoginError(f"the credential issuer {self.url} cannot be reached: {exc}", retriable=True) from None

    async def obtain(self) -> Creds:
        """New credentials from the issuer, written to `creds_file`."""
        answer = await asyncio.to_thread(self._ask)
        try:
            jwt = str(answer["jwt"])
            claims = decode_claims(jwt)
        except (KeyError, TypeError, ValueError):
            raise LoginError(f"the credential issuer {self.url} answered without a user JWT", retriable=True) \
                from None
        if claims.get("sub") != self.public_key:
            raise LoginError("the issued JWT is for another key", retriable=False)
        creds = Creds(jwt=jwt, seed=self.seed)
        _write_private(self.creds_file, creds.text())
        self.issued_at, self.user = float(claims.get("iat") or self.clock()), creds.name
        self.expires = float(claims["exp"]) if "exp" in claims else None
        log.info("bus credentials for %s issued, valid until %s", self.user, self.expires)
        return creds

    async def obtain_retrying(self, *, retry_s: float = 5.0, attempts: int = 60) -> Creds:
        """`obtain()`, retried while the issuer is unavailable (it may start
        after the agent); a refusal is raised at once."""
        for attempt in range(attempts):
            try:
                return await self.obtain()
            except LoginError as exc:
                if not exc.retriable or attempt == attempts - 1:
                    raise
                log.warning("%s; trying again in %.0fs", exc, retry_s)
                await asyncio.sleep(retry_s)
        raise AssertionError("unreachable")

    def renew_due(self) -> float | None:
        """When to renew (clock time); None for credentials that do not expire."""
        if self.issued_at is None or self.expires is None:
            return None
        return renew_at(self.issued_at, self.expires)

    async def renew_if_due(self, reconnect: Callable[[], Awaitable[None]]) -> bool:
        """Renew and log in again when due; whether it did. A failure is
        logged and left for the next call while the old JWT still holds,
        raised once it has expired."""
        due = self.renew_due()
        if due is None or self.clock() < due:
            return False
        try:
            await self.obtain()
        except LoginError as exc:
            if self.expires is not None and self.clock() >= self.expires:
                raise LoginError(f"bus credentials expired and could not be renewed: {exc}",
                                 retriable=False) from None
            log.warning("renewing the bus credentials: %s (the current ones hold until %s)", exc, self.expires)
            return False
        await reconnect()
        return True

    async def keep_renewed(self, reconnect: Callable[[], Awaitable[None]], *, check_s: float = 5.0) -> None:
        """Renew whenever due, until cancelled."""
        while True:
            await self.renew_if_due(reconnect)
            await asyncio.sleep(check_s)


def _write_private(path: Path, text: str) -> None:
    """Replace `path` whole (mode 0600): a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(partial, path)
