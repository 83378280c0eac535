"""Whether the broker can take writes, asked on a timer (for /readyz)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tidal_bus.api import Backend


async def unavailability(backend: Backend, every_s: float) -> AsyncIterator[str | None]:
    """Every `every_s`: why the broker cannot take writes now, or None."""
    while True:
        try:
            yield await asyncio.wait_for(backend.unavailable(), every_s)
        except asyncio.TimeoutError:
            yield f"the broker did not answer within {every_s:g}s"
        await asyncio.sleep(every_s)
