"""The simulation clock: scenario seconds since the start, and the datetime
events carry. Simulated: each tick adds `tick_s`, as fast as the pipeline
goes. Real time: scenario time is wall time since the start."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from tidal_clock import elapsed


class SimClock:
    def __init__(self, start: datetime, tick_s: float, real_time: bool = False,
                 wall: Callable[[], float] = elapsed) -> None:
        if tick_s <= 0:
            raise ValueError(f"tick_s must be > 0, got {tick_s}")
        self.start = start
        self.tick_s = tick_s
        self.real_time = real_time
        self._wall = wall
        self._wall0 = wall()
        self._t = 0.0
        self.ticks = 0

    @property
    def t_s(self) -> float:
        """Scenario seconds since the start."""
        return self._wall() - self._wall0 if self.real_time else self._t

    def now(self) -> datetime:
        """The time events carry: start + scenario time."""
        return self.start + timedelta(seconds=self.t_s)

    def advance(self) -> float:
        """One tick on; the new scenario time."""
        self.ticks += 1
        if not self.real_time:
            self._t = round(self._t + self.tick_s, 6)
        return self.t_s

    def next_tick_wall_s(self) -> float:
        """Real time: seconds to wait for the next tick boundary."""
        return max((self.ticks + 1) * self.tick_s - (self._wall() - self._wall0), 0.0) if self.real_time else 0.0
