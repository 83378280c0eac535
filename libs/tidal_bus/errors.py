"""Errors of the bus and of event handlers.

Every error says whether it is retriable: the consumer loop retries those
with back-off and dead-letters the rest at once.
"""


class BusError(Exception):
    """Root of the bus library's errors."""

    retriable = True


class BusConfigError(BusError):
    """A bus URL or setting is wrong; retrying cannot help."""

    retriable = False


class HandlerError(Exception):
    """Raised by a handler to say how its failure should be treated."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


def is_retriable(exc: BaseException) -> bool:
    """Whether retrying the same event might succeed. Unknown exceptions
    count as retriable (a transient fault looks the same as a bug at first);
    the attempt limit then dead-letters them."""
    return bool(getattr(exc, "retriable", True))
