"""The live streams as `tidal replay` reads a recording: only read.

The live bus is read through `LiveStreams`, which has no way to publish: a
replay runs placement's journal in-process (replay_exact.py) and writes
nothing to the broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tidal_bus import Bus, StartAt
from tidal_schemas import Envelope, SchemaError


class LiveStreams:
    """The live bus, read-only: the replay must never publish into it."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    def read(self, stream: str) -> AsyncIterator[tuple[Any, Envelope[Any] | SchemaError]]:
        return self._bus.read(stream, StartAt.earliest())

