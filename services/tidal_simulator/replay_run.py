"""Reading a recording for `tidal replay`: the live streams, only read.

The live bus is read through `LiveStreams`, which has no way to publish: a
replay runs placement's journal in-process (replay_exact.py) and writes
nothing to the broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tidal_bus import Bus, StartAt
from tidal_schemas import Envelope, SchemaError

from .replay_plan import INPUT_STREAMS, Recorded


class LiveStreams:
    """The live bus, read-only: the replay must never publish into it."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    def read(self, stream: str) -> AsyncIterator[tuple[Any, Envelope[Any] | SchemaError]]:
        return self._bus.read(stream, StartAt.earliest())


async def read_recorded(live: LiveStreams, cluster: str) -> list[Recorded]:
    """Placement's inputs of `cluster`, as recorded (what a window is cut from)."""
    return [Recorded(stream, raw.position, event, raw.stored_at) for stream in INPUT_STREAMS
            async for raw, event in live.read(stream) if not isinstance(event, SchemaError) and event.cluster == cluster]
