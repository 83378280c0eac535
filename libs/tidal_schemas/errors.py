"""Errors of the schema library."""

MAX_MESSAGE = 500
"""Longest message a SchemaError carries: it may quote what it refused, and
that can be a megabyte of somebody else's bytes."""


class SchemaError(ValueError):
    """An event or file does not match its schema. Never retriable: the same
    bytes will fail the same way, so consumers dead-letter them at once.

    The message is always one line of at most MAX_MESSAGE characters: line
    breaks from quoted input are escaped, so a log line or a CLI error stays
    one line whatever the input held."""

    retriable = False

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class IdentityError(SchemaError):
    """A well-formed event that does not speak for whom it claims: its
    envelope, payload and (on the bus) subject name different keys or
    clusters."""


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` with line and paragraph breaks escaped, cut to `limit` characters."""
    flat = text.replace("\r", "\\r").replace("\n", "\\n").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"
