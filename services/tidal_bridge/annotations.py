"""The `tidal.dev/` annotations and labels a pod uses to ask for more than
plain requests, parsed into checked values (pure).

Read from the pod:

| key | on | values | default | `PodLifecycle` field |
|---|---|---|---|---|
| `tidal.dev/gpu-milli` | resource (requests = limits) | q: 1..1000 (one GPU, q milli) or a multiple of 1000 (q / 1000 whole GPUs) | no GPU | `gpu.count`, `gpu.milli` (gpu_ask.py; the older form below, when also given, must ask the same) |
| `tidal.dev/exclusive-cpus` | annotation | `true` / `false` | `false` | `exclusive_cpus` (needs whole, non-zero CPU requests) |
| `tidal.dev/cpu-policy` | annotation | `spread`, `single-numa`, `auto` | unset: placement's default | `cpu_policy` |
| `tidal.dev/gpu-count` | annotation (older form) | whole number 0..1024 | the pod's `nvidia.com/gpu` limits, else 1 if `gpu-milli` is given, else 0 | `gpu.count` |
| `tidal.dev/gpu-milli` | annotation (older form) | 1..1000, per GPU (1000 = whole GPU) | 1000 | `gpu.milli` (below 1000 the count must be 1) |
| `tidal.dev/gpu-models` | annotation | models separated by `\\|`, e.g. `A100\\|V100` | any model | `gpu.models` |
| `tidal.dev/gpu-kind` | annotation | `physical`, `virtual` | either | `gpu.kind` |
| `tidal.dev/gpu-group` | annotation | a GPU group name of the tenant | any of the tenant's groups | `gpu.group` |
| `tidal.dev/tenant` | label | a name | the pod's namespace | `tenant` |
| `tidal.dev/user` | label | a name | `default` | `user` |
| `tidal.dev/qos` | label | `LS`, `BE` | Kubernetes QoS class Guaranteed → `LS`, else `BE` | `qos` |
| `tidal.dev/evictable` | label | `true` / `false` | `false` | `evictable` |

Written by the bridge (never read as asks): the decision a pod was bound
by (`tidal.dev/decision-id`, `tidal.dev/numa-cpus`, `tidal.dev/gpus`, written
and read back by `tidal_schemas.decision_codec`). Nothing on nodes: the
oversold allocatable reaches the node's `status.allocatable` through the
admission webhook (docs/last-mile.md), not the bridge.

`true`/`false`, `LS`/`BE` are case-insensitive. Any other annotation under
`tidal.dev/` is an error (a typo must not be silently ignored); other labels
under the prefix are left alone. A malformed value makes the pod
unschedulable with a reason naming the key and value, e.g.
`annotation tidal.dev/gpu-milli: "1500" is not in 1..1000`. The value is
quoted as JSON and cut to 64 characters, so a problem is always one short
line; whole numbers are plain ASCII digits (no `²`, no other scripts').
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from tidal_schemas.common import CpuPolicy
from tidal_schemas.decision_codec import DECISION_KEYS, PREFIX

EXCLUSIVE_CPUS = PREFIX + "exclusive-cpus"
CPU_POLICY = PREFIX + "cpu-policy"
GPU_COUNT = PREFIX + "gpu-count"
GPU_MILLI = PREFIX + "gpu-milli"
GPU_MODELS = PREFIX + "gpu-models"
GPU_KIND = PREFIX + "gpu-kind"
GPU_GROUP = PREFIX + "gpu-group"
TENANT = PREFIX + "tenant"
USER = PREFIX + "user"
QOS = PREFIX + "qos"
EVICTABLE = PREFIX + "evictable"

WRITTEN_ON_PODS = frozenset(DECISION_KEYS)
MAX_NAME = 253
MAX_GPUS = 1024  # far above any node; bounds the number so the event stays a 64-bit integer
_SHOWN = 64  # characters of a bad value quoted in a problem


@dataclass(frozen=True)
class Asks:
    """What a pod's Tidal keys say; None = not given. `problems` lists every
    malformed key, each as one precise sentence."""

    exclusive_cpus: bool | None = None
    cpu_policy: str | None = None
    gpu_count: int | None = None
    gpu_milli: int | None = None
    gpu_models: tuple[str, ...] = ()
    gpu_kind: str | None = None
    gpu_group: str | None = None
    tenant: str | None = None
    user: str | None = None
    qos: str | None = None
    evictable: bool | None = None
    problems: tuple[str, ...] = ()


def _boolean(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("is not true or false")
    return lowered == "true"


def _one_of(*choices: str, upper: bool = False) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().upper() if upper else raw.strip()
        if value not in choices:
            raise ValueError(f"is not one of {', '.join(choices)}")
        return value
    return parse


def _whole(low: int, high: int) -> Callable[[str], int]:
    where = f"in {low}..{high}"

    def parse(raw: str) -> int:
        text = raw.strip()
        # str.isdigit() alone takes "²" (int() then fails) and other scripts' digits.
        if not text or not text.isascii() or not text.isdigit():
            raise ValueError(f"is not a whole number {where}")
        if len(text.lstrip("0")) > len(str(high)) or not low <= int(text) <= high:
            raise ValueError(f"is not {where}")
        return int(text)
    return parse


def _name(raw: str) -> str:
    value = raw.strip()
    if not value or len(value) > MAX_NAME:
        raise ValueError(f"must be a name of 1..{MAX_NAME} characters")
    return value


def _models(raw: str) -> tuple[str, ...]:
    models = tuple(part.strip() for part in raw.split("|"))
    if any(not m for m in models):
        raise ValueError("has an empty model name (separate models with a single |)")
    if any(len(m) > MAX_NAME for m in models):
        raise ValueError(f"has a model name longer than {MAX_NAME} characters")
    return models


# key -> (Asks field, parser)
ANNOTATION_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    EXCLUSIVE_CPUS: ("exclusive_cpus", _boolean),
    CPU_POLICY: ("cpu_policy", _one_of(*get_args(CpuPolicy))),
    GPU_COUNT: ("gpu_count", _whole(0, MAX_GPUS)),
    GPU_MILLI: ("gpu_milli", _whole(1, 1000)),
    GPU_MODELS: ("gpu_models", _models),
    GPU_KIND: ("gpu_kind", _one_of("physical", "virtual")),
    GPU_GROUP: ("gpu_group", _name),
}
LABEL_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    TENANT: ("tenant", _name),
    USER: ("user", _name),
    QOS: ("qos", _one_of("LS", "BE", upper=True)),
    EVICTABLE: ("evictable", _boolean),
}


def _quoted(raw: Any) -> str:
    """A value as it appears in a problem: JSON-quoted (so line breaks show
    as \\n), at most _SHOWN characters of it."""
    text = str(raw)
    return json.dumps(text if len(text) <= _SHOWN else text[:_SHOWN] + "…", ensure_ascii=False)


def _key(key: str) -> str:
    """A key as it appears in a problem: as is when printable (what the API
    server allows), escaped otherwise."""
    return key if key.isprintable() else key.encode("unicode_escape").decode()


def parse_asks(annotations: Mapping[str, Any] | None, labels: Mapping[str, Any] | None) -> Asks:
    """Parse every `tidal.dev/` annotation and label of a pod; each malformed
    or misplaced key adds one problem, the others are still parsed."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for where, given, keys, other in (("annotation", annotations or {}, ANNOTATION_KEYS, LABEL_KEYS),
                                      ("label", labels or {}, LABEL_KEYS, ANNOTATION_KEYS)):
        if not isinstance(given, Mapping):  # the API server never sends this; a hand-made object might
            problems.append(f"{where}s: not a mapping of keys to values, got {type(given).__name__}")
            continue
        for key in sorted(k for k in given if isinstance(k, str) and k.startswith(PREFIX)):
            raw = given[key]
            if key in keys:
                field, parse = keys[key]
                try:
                    values[field] = parse(str(raw))
                except ValueError as exc:
                    problems.append(f"{where} {key}: {_quoted(raw)} {exc}")
            elif key in other:
                problems.append(f"{where} {key}: is read from {'labels' if where == 'annotation' else 'annotations'}, "
                                f"not {where}s")
            elif where == "annotation" and key not in WRITTEN_ON_PODS:
                problems.append(f"annotation {_key(key)[:_SHOWN + len(PREFIX)]}: unknown Tidal annotation "
                                f"(known: {', '.join(k.removeprefix(PREFIX) for k in ANNOTATION_KEYS)})")
    return Asks(**values, problems=tuple(problems))
