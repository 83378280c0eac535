"""Reading a service's action log back: its own `node.action` events and
every `action.result`, the input of the shared action memory
(`tidal_policy.action_memory`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tidal_bus import Bus, StartAt
from tidal_schemas import Envelope, SchemaError

LOG_STREAMS = ("node.action", "action.result")


async def follow_action_log(bus: Bus, apply: Callable[[Envelope[Any]], None], caught_up: Callable[[], None]) -> None:
    """Hand `apply` every event of the log: all actions present at the start,
    then all results (so a result always finds its action), call `caught_up`,
    then both streams live. The memory tolerates redelivery, so the live
    part needs no order between the two."""
    last: dict[str, dict[int, int]] = {}
    for name in LOG_STREAMS:
        last[name] = {}
        async for raw, event in bus.read(name, StartAt.earliest()):
            last[name][raw.partition] = raw.position
            if not isinstance(event, SchemaError):
                apply(event)
    caught_up()

    async def follow(name: str) -> None:
        async for _, event in bus.read(name, StartAt.after(last[name]), follow=True):
            if not isinstance(event, SchemaError):
                apply(event)

    await asyncio.gather(*(follow(name) for name in LOG_STREAMS))
