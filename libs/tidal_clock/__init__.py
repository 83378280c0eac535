"""The one place Tidal reads the wall clock.

Decisions take time from a clock passed in (`Clock`: seconds since the epoch,
as `time.time` gives). Live that clock is `wall_clock`; in a replay it is a
`ReplayClock` the replay moves to each recorded event's time, so a decision
made at T in the recording is made at T again. Nothing else in `services/`
or `libs/` calls `time.time()`, `time.monotonic()` or `datetime.now()`
(`tests/test_clock_injected.py` fails on one).

Waiting for the world (a process to start, a port to open, a command's own
run time) is not a decision: it reads `elapsed()` from here, a monotonic
stopwatch, so the rule above needs no exceptions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

Clock = Callable[[], float]
"""Seconds since the epoch, as a float."""


def wall_clock() -> float:
    """The live clock: the machine's wall time."""
    return time.time()


def wall_clock_ns() -> int:
    """The machine's wall time in nanoseconds, for names that must differ
    (an Event object's, as client-go makes them), not for deciding."""
    return time.time_ns()


def now_utc(clock: Clock = wall_clock) -> datetime:
    """`clock`'s time as an aware UTC datetime."""
    return datetime.fromtimestamp(clock(), timezone.utc)


def elapsed() -> float:
    """A monotonic reading in seconds, for deadlines and stopwatches that
    decide nothing (how long to wait for a server, how long a command ran)."""
    return time.monotonic()


def elapsed_ns() -> int:
    """`elapsed()` in integer nanoseconds, for rates over short spans (CPU
    time used per nanosecond between two reads)."""
    return time.monotonic_ns()


class ReplayClock:
    """A clock that stands still until told: the replay sets it to the time
    each recorded input was read, so every decision sees the recorded time."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        """Move to `t`; a replay never moves its clock backwards."""
        self.t = max(self.t, t)
