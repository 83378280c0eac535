"""A cluster's streams from a bus, merged into the order the broker stored
them (each stream's own order kept), for `registry.audit`."""

from __future__ import annotations

import heapq
from datetime import datetime, timezone
from typing import Any

from tidal_bus import StartAt
from tidal_schemas import Envelope, SchemaError

from .registry import STREAMS

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


async def read_streams(bus, streams=STREAMS) -> list[Envelope[Any]]:
    """Every decodable event of `streams` from the earliest, merged by
    broker time (ties: stream, then position)."""
    lanes = []
    for rank, name in enumerate(streams):
        lane = []
        async for raw, event in bus.read(name, StartAt.earliest()):
            if not isinstance(event, SchemaError):
                lane.append(((raw.stored_at or EPOCH), rank, raw.partition, raw.position, event))
        lane.sort(key=lambda row: row[:4])
        lanes.append(lane)
    return [row[-1] for row in heapq.merge(*lanes, key=lambda row: row[:4])]
