"""CLI errors: one line for the user, and the exit code that goes with it."""


class CliError(Exception):
    """A problem the user can fix (bad file, bad flag): exit 2 by default."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
