"""What a NATS server refused, remembered: nats-py reports a refused
publish or subscription only as text on the error callback, and the request
itself then times out; remembering the refusals turns that timeout into a
clear, non-retriable error naming the subject and the user."""

from __future__ import annotations

import re

from .auth import BusPermissionError

# e.g. 'nats: permissions violation for publish to "subj"'
VIOLATION = re.compile(r"permissions violation for (publish|subscription) to \"?([^\"\s]+)", re.IGNORECASE)
AUTH_FAILURE = re.compile(r"authorization violation|authentication (error|timeout)|user authentication expired",
                           re.IGNORECASE)


class Refusals:
    """Subjects the server refused this connection, by verb."""

    def __init__(self) -> None:
        self._refused: dict[str, str] = {}  # subject (lowercase) -> "publish" / "subscription"

    def note(self, text: str) -> tuple[str, str] | None:
        """Remember a refusal the error text reports: (verb, subject), or None."""
        refused = VIOLATION.search(text)
        if not refused:
            return None
        # nats-py lowercases the server's message: subjects are compared in lowercase
        self._refused[refused.group(2).lower()] = refused.group(1).lower()
        return refused.group(1).lower(), refused.group(2)

    def error(self, user: str, *subjects: str, containing: str | None = None) -> BusPermissionError | None:
        """The permission error the server reported for one of `subjects`
        (or for any subject containing `containing`), else None."""
        said = next((f"{self._refused[s.lower()]} to {s}" for s in subjects if s.lower() in self._refused), None)
        if said is None and containing is not None:
            said = next((f"{verb} to {subject}" for subject, verb in self._refused.items()
                         if containing.lower() in subject), None)
        if said is None:
            return None
        return BusPermissionError(f"NATS refused {said}: user {user} is not permitted to "
                                  "(see the server's authorization, e.g. from `tidal nats-config`)")


def credentials_hint(reason: str) -> str:
    """What to set, given why the server or the TLS handshake refused us."""
    text = reason.lower()
    if "certificate required" in text:
        return " (the server requires a client certificate: set TIDAL_BUS_TLS_CERT_FILE and TIDAL_BUS_TLS_KEY_FILE)"
    if "certificate" in text or "ssl" in text:
        return " (the server's certificate is not trusted: set TIDAL_BUS_TLS_CA_FILE to its CA)"
    return " (check TIDAL_BUS_USER / TIDAL_BUS_PASSWORD_FILE / TIDAL_BUS_CREDS_FILE)"
