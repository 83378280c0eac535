"""Linux cpulist strings (`0-3,8,10-11`), as found in sysfs and cgroup files."""

from __future__ import annotations

from collections.abc import Iterable

MAX_CPU_ID = 65_535
"""Far above any kernel's CPU count (x86 MAXSMP is 8192), low enough that a
hostile `0-99999999999` is refused instead of building a huge list."""


def parse_cpuset(text: str) -> list[int]:
    """The sorted, de-duplicated CPU ids a cpulist names.

    Grammar: comma-separated items, each `N` or `N-M` with `N <= M <=
    MAX_CPU_ID`; blank text (an empty sysfs file) is the empty set. Raises
    ValueError naming the offending item."""
    body = text.strip()
    if not body:
        return []
    ids: set[int] = set()
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"bad cpuset {_shown(text)}: empty item")
        low_text, sep, high_text = item.partition("-")
        low = _cpu_id(low_text, text)
        high = _cpu_id(high_text, text) if sep else low
        if high < low:
            raise ValueError(f"bad cpuset {_shown(text)}: range {_shown(item)} runs backwards")
        ids.update(range(low, high + 1))
    return sorted(ids)


def format_cpuset(ids: Iterable[int]) -> str:
    """The canonical cpulist of `ids`: ascending, runs of two or more as `a-b`.

    Raises ValueError on a negative id."""
    unique = sorted(set(ids))
    if unique and unique[0] < 0:
        raise ValueError(f"bad cpu id {unique[0]}: CPU ids are non-negative")
    runs: list[str] = []
    start = prev = None
    for cpu in unique:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            runs.append(_run(start, prev))
        start = prev = cpu
    if start is not None:
        runs.append(_run(start, prev))
    return ",".join(runs)


def _run(start: int, end: int) -> str:
    return str(start) if start == end else f"{start}-{end}"


def _cpu_id(token: str, text: str) -> int:
    token = token.strip()
    # isdigit() alone accepts non-ASCII digits; cpulists are plain ASCII.
    if not token or not token.isascii() or not token.isdigit():
        raise ValueError(f"bad cpuset {_shown(text)}: {_shown(token)} is not a CPU id")
    if len(token) > 5 or int(token) > MAX_CPU_ID:
        raise ValueError(f"bad cpuset {_shown(text)}: CPU id {_shown(token)} is above {MAX_CPU_ID}")
    return int(token)


def _shown(text: str) -> str:
    quoted = repr(text.strip())
    return quoted if len(quoted) <= 60 else quoted[:60] + "…"
