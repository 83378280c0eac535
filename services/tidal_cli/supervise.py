"""When `tidal up` starts a crashed process again: exponential back-off, as
a supervisor (or Kubernetes' CrashLoopBackOff) does.

A process that exits is started again after `delay(failures)`: 1 s, 2 s,
4 s … up to `cap_s`. `failures` counts exits in a row that came soon after
a start; a process that ran for `stable_s` before exiting starts the count
again, so one crash a day waits a second, not the cap.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """The restart policy: base delay, cap, and how long a run counts as stable."""

    base_s: float = 1.0
    cap_s: float = 30.0
    stable_s: float = 60.0

    def delay(self, failures: int) -> float:
        """Seconds to wait before the restart after `failures` quick exits in a
        row (failures >= 1): base · 2^(failures-1), at most cap."""
        return min(self.base_s * 2 ** min(failures - 1, 62), self.cap_s)


@dataclass
class Supervised:
    """What the supervisor knows of one process it keeps running."""

    name: str
    started_at: float
    restarts: int = 0
    failures: int = 0
    restart_at: float | None = None
    last_exit: int | None = None

    def exited(self, code: int, now: float, policy: Backoff) -> float:
        """Record an exit at `now`; the delay before the restart."""
        quick = now - self.started_at < policy.stable_s
        self.failures = self.failures + 1 if quick else 1
        self.last_exit = code
        delay = policy.delay(self.failures)
        self.restart_at = now + delay
        return delay

    def due(self, now: float) -> bool:
        """Whether a scheduled restart is due."""
        return self.restart_at is not None and now >= self.restart_at

    def restarted(self, now: float) -> None:
        self.restarts += 1
        self.started_at = now
        self.restart_at = None


def describe_exit(code: int) -> str:
    """`code 3`, or `signal 9 (SIGKILL)` for a negative Popen return code."""
    if code >= 0:
        return f"code {code}"
    import signal

    try:
        return f"signal {-code} ({signal.Signals(-code).name})"
    except ValueError:
        return f"signal {-code}"
