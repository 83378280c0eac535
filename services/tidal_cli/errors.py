"""CLI errors: one line for the user, and the exit code that goes with it."""


class CliError(Exception):
    """A problem the user can fix (bad file, bad flag): exit 2 by default."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# What str.splitlines() breaks on: a value quoted in a message may hold any of them
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: str) -> str:
    """The message on one line: newlines become "; ", other line breaks
    (form feed, NEL, … inside a quoted value) their escapes."""
    return "; ".join(part for part in message.translate(_LINE_BREAKS).split("\n") if part.strip())
