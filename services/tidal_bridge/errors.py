"""Errors of the bridge. Each says whether retrying can help; handlers turn
retriable ones into a later retry and the rest into a failed result."""

from __future__ import annotations

from tidal_bus import HandlerError

RETRIABLE_CODES = frozenset({429, 500, 502, 503, 504})


class BridgeError(Exception):
    """Root of the bridge's errors."""

    retriable = True


class KubeUnavailable(BridgeError):
    """The API server could not be reached, or the connection broke."""

    retriable = True


class KubeStatusError(BridgeError):
    """The API server answered with an error Status (404, 409, 410, 429 …)."""

    def __init__(self, code: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.retriable = code in RETRIABLE_CODES

    @classmethod
    def from_status(cls, code: int, status: object) -> "KubeStatusError":
        """From a decoded Status object (or anything else the server sent)."""
        if isinstance(status, dict):
            return cls(int(status.get("code") or code), str(status.get("reason") or ""),
                       str(status.get("message") or ""))
        return cls(code, "", str(status)[:500])


class WatchExpired(BridgeError):
    """410 Gone: the resourceVersion asked for is older than the server keeps."""


def worth_retrying(exc: BridgeError, attempt: int, limit: int) -> bool:
    """Whether a call that failed so on try `attempt` (of `limit`) may succeed later."""
    return exc.retriable and attempt < limit


def unavailable(exc: BridgeError, attempt: int, limit: int) -> str:
    """Retry later while deliveries are left (raises a retriable
    HandlerError); else the reason the call failed for good."""
    if worth_retrying(exc, attempt, limit):
        raise HandlerError(f"API server: {exc}", retriable=True) from exc
    return f"API server failed after {attempt} attempt(s): {exc}"
