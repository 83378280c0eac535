"""A placement decision as the pod carries it (SPEC §A step 5: the NUMA result
is persisted with the pod and deleted when binding fails), both directions.

The bridge writes these annotations before binding and reads them back from
every bound or running pod it reports, so what a pod holds survives the round
trip through Kubernetes and any restart of any Tidal service:

| key | value |
|---|---|
| `tidal.dev/decision-id` | the `PlacementDecision.decision_id` the pod was bound by |
| `tidal.dev/numa-cpus` | JSON `{"<numa id>": <exclusive CPUs>}`, sorted by NUMA id |
| `tidal.dev/gpus` | JSON `[{"gpu": "<id>", "milli": <1..1000>, "model": "<model>"}]` (`model` omitted when unknown) |

`read_decision` never raises: a malformed value is a problem sentence, and
the caller accounts the pod by its requests instead of trusting the value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from .common import MAX_NUMA_ID
from .placement import GpuShare, PlacementDecision

PREFIX = "tidal.dev/"
DECISION_ID = PREFIX + "decision-id"
NUMA_CPUS = PREFIX + "numa-cpus"
GPUS = PREFIX + "gpus"
DECISION_KEYS = (DECISION_ID, NUMA_CPUS, GPUS)

MAX_ENTRIES = 1024  # NUMA nodes or GPUs of one pod: far above any machine, bounds hostile input
MAX_TEXT = 64 * 1024
_MAX_CPUS = 1 << 20


@dataclass(frozen=True)
class HeldDecision:
    """What a bound pod holds by the decision written on it."""

    decision_id: str
    numa_cpus: dict[int, int] = field(default_factory=dict)
    gpus: tuple[GpuShare, ...] = ()


def write_decision(decision: PlacementDecision) -> dict[str, str]:
    """The pod annotations that persist a decision (compact JSON)."""
    numa = {str(k): v for k, v in sorted(decision.numa_cpus.items())}
    gpus = [{"gpu": s.gpu, "milli": s.milli, **({"model": s.model} if s.model else {})} for s in decision.gpus]
    return {
        DECISION_ID: decision.decision_id,
        NUMA_CPUS: json.dumps(numa, separators=(",", ":")),
        GPUS: json.dumps(gpus, separators=(",", ":")),
    }


def _numa(text: str) -> dict[int, int]:
    value = json.loads(text)
    if not isinstance(value, dict) or len(value) > MAX_ENTRIES:
        raise ValueError(f"is not an object of at most {MAX_ENTRIES} NUMA ids")
    numa: dict[int, int] = {}
    for key, cpus in value.items():
        if not (key.isascii() and key.isdigit() and len(key) <= 6 and int(key) <= MAX_NUMA_ID):
            raise ValueError(f"has NUMA id {key[:16]!r}, not a whole number of 0..{MAX_NUMA_ID}")
        if type(cpus) is not int or not 0 <= cpus <= _MAX_CPUS:
            raise ValueError(f"has {str(cpus)[:16]!r} CPUs on NUMA {key}, not a whole number")
        numa[int(key)] = cpus
    return {k: v for k, v in numa.items() if v}


def _gpus(text: str) -> tuple[GpuShare, ...]:
    value = json.loads(text)
    if not isinstance(value, list) or len(value) > MAX_ENTRIES:
        raise ValueError(f"is not a list of at most {MAX_ENTRIES} GPUs")
    shares = []
    for entry in value:
        if not isinstance(entry, dict):
            raise ValueError("has an entry that is not an object")
        try:
            shares.append(GpuShare.model_validate(entry))
        except ValidationError as exc:
            raise ValueError(f"has an invalid entry ({exc.error_count()} problem(s): "
                             f"{exc.errors()[0]['msg']})") from None
    if len({s.gpu for s in shares}) != len(shares):
        raise ValueError("names a GPU twice")
    return tuple(shares)


def read_decision(annotations: Mapping[str, Any] | None) -> tuple[HeldDecision | None, str | None]:
    """(the decision written on a pod, None) — or (None, None) when it carries
    none, or (None, why) when one is there but malformed."""
    given = annotations if isinstance(annotations, Mapping) else {}
    present = [key for key in DECISION_KEYS if key in given]
    if not present:
        return None, None
    if len(present) < len(DECISION_KEYS):
        missing = ", ".join(key for key in DECISION_KEYS if key not in given)
        return None, f"decision annotations incomplete: {missing} missing"
    decision_id = given[DECISION_ID]
    if not isinstance(decision_id, str) or not 1 <= len(decision_id) <= 253:
        return None, f"annotation {DECISION_ID}: not a name of 1..253 characters"
    parsed: dict[str, Any] = {}
    for key, parse in ((NUMA_CPUS, _numa), (GPUS, _gpus)):
        raw = given[key]
        try:
            if not isinstance(raw, str) or len(raw) > MAX_TEXT:
                raise ValueError(f"is not JSON text of at most {MAX_TEXT} characters")
            parsed[key] = parse(raw)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            reason = str(exc) if not isinstance(exc, json.JSONDecodeError) else f"is not JSON ({exc.msg})"
            return None, f"annotation {key}: {reason}"
    return HeldDecision(decision_id, parsed[NUMA_CPUS], parsed[GPUS]), None
