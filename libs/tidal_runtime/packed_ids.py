"""Ids kept in less: a service keeping 150,000 pods keeps their uids (and
the decisions that bound them) as 128-bit integers, not as text.

A uid or decision id in the canonical UUID form (what the API server gives
every pod, and Tidal every decision) is kept as its 128 bits, 48 bytes
against 88 for the text; any other text as itself. One to one: only the
canonical form is packed, so `unpacked_id` gives back the very text.
Compare packed values with `!= ""` for "has an id": the nil UUID packs to 0.
"""

from __future__ import annotations

import re
from operator import attrgetter

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def packed_id(text: str) -> int | str:
    return int(text.replace("-", ""), 16) if len(text) == 36 and _UUID.fullmatch(text) else text


def unpacked_id(value: int | str) -> str:
    if isinstance(value, str):
        return value
    x = f"{value:032x}"
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def read_as_text(slot: str) -> property:
    """A property reading the id kept packed in `slot` as its text."""
    packed = attrgetter(slot)
    return property(lambda self: unpacked_id(packed(self)))
