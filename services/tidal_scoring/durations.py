"""Durations as operators write them: `90`, `90s`, `15m`, `2h`, `7d`, `1.5h`."""

from __future__ import annotations

import math
import re

_UNITS_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float | None:
    """Seconds in `text`: a non-negative number with an optional unit suffix
    (s, m, h, d, w; none = seconds). Returns None when `text` is not a
    duration, so callers can name the bad value in their own message."""
    match = _DURATION.match(text)
    if match is None:
        return None
    seconds = float(match.group(1)) * _UNITS_S[match.group(2).lower()]
    return seconds if math.isfinite(seconds) else None
