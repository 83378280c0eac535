"""The keys of `NodeAction.measured` that remediation writes and reads back.

`measured` is a flat `dict[str, float]`, and it is all the memory has when
it is rebuilt from the log, so everything the memory needs travels in it:

    at                 round time (epoch seconds) — also the freeze / move time
    sent_at, attempt   when this attempt was sent, and which attempt (1 = first)
    numa               the NUMA node acted on (the source of a move)
    load               its measured load at the start of the round
    load_before        its projected load just before this action
    projected          its projected load just after this action
    threshold          the threshold the action answers (high, or low for thaw)
    pod_cpu_milli      the pod's usage (for a thaw: its usage when frozen;
                       absent when unknown)
    share_milli.<m>    the part of that usage attributed to NUMA node m
    target_numa, target_load, target_projected       (moves only)
    from_cpu.<id> = 1  one key per CPU of the pod's cpuset before a move
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone

from tidal_policy.action_memory import ATTEMPT, SENT_AT  # noqa: F401 (keys of `measured`; the shared memory reads them back)

AT = "at"
NUMA = "numa"
LOAD = "load"
LOAD_BEFORE = "load_before"
PROJECTED = "projected"
THRESHOLD = "threshold"
POD_CPU = "pod_cpu_milli"
TARGET_NUMA = "target_numa"
TARGET_LOAD = "target_load"
TARGET_PROJECTED = "target_projected"
SHARE_PREFIX = "share_milli."
FROM_CPU_PREFIX = "from_cpu."


def to_epoch(when: datetime) -> float:
    """Epoch seconds of an aware datetime (float64 keeps microseconds)."""
    if when.tzinfo is None:
        raise ValueError(f"naive datetime {when!r}: remediation times must be timezone-aware")
    return when.timestamp()


def from_epoch(seconds: float) -> datetime:
    """The UTC datetime of epoch seconds."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def encode_shares(shares: Mapping[int, float]) -> dict[str, float]:
    """{m: milli} → {"share_milli.m": milli}."""
    return {f"{SHARE_PREFIX}{numa}": float(milli) for numa, milli in sorted(shares.items())}


def decode_shares(measured: Mapping[str, float]) -> dict[int, float]:
    """The per-NUMA shares written by `encode_shares`."""
    return {int(key[len(SHARE_PREFIX):]): value for key, value in measured.items() if key.startswith(SHARE_PREFIX)}


def encode_cpus(cpus: tuple[int, ...]) -> dict[str, float]:
    """A cpuset as one `from_cpu.<id>` key per CPU."""
    return {f"{FROM_CPU_PREFIX}{cpu}": 1.0 for cpu in cpus}


def decode_cpus(measured: Mapping[str, float]) -> tuple[int, ...]:
    """The cpuset written by `encode_cpus`, ascending."""
    return tuple(sorted(int(key[len(FROM_CPU_PREFIX):]) for key in measured if key.startswith(FROM_CPU_PREFIX)))
