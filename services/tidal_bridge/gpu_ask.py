"""What GPUs a pod asks (pure), in either of its two forms.

The resource (docs/last-mile.md: the node agent's device plugin advertises
each GPU as 1000 units of `tidal.dev/gpu-milli`), its total q by the request
formula of pods.py:

    q = 0                       → no GPU asked this way
    1 ≤ q ≤ 1000                → one GPU, q milli (q = 1000: a whole GPU)
    q > 1000, q mod 1000 = 0    → q / 1000 whole GPUs
    anything else               → invalid (not a share of one GPU, nor whole GPUs)

The older form, for clusters running NVIDIA's device plugin: the count from
the `nvidia.com/gpu` limits (the bridge's `gpu_resource`) or the
`tidal.dev/gpu-count` annotation, the share per GPU from the
`tidal.dev/gpu-milli` annotation. A pod giving both forms must ask the same
(count, milli) in each. As for every extended resource, a container giving
both requests and limits of a GPU resource must give them equal (the API
server refuses the pod otherwise, so this is only met in hand-made objects).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from tidal_schemas import GpuAsk
from tidal_schemas.envelope import describe_validation_error

from .annotations import GPU_COUNT, GPU_MILLI, Asks
from .quantity import QuantityError, parse_quantity

GPU_MILLI_RESOURCE = "tidal.dev/gpu-milli"
MILLI = 1000


def gpus_of_milli(q: int) -> tuple[int, int] | str:
    """(count, milli per GPU) of a `tidal.dev/gpu-milli` total q (the table
    of the module docstring), or why q asks neither."""
    if q <= MILLI:
        return (1, q) if q else (0, MILLI)
    if q % MILLI == 0:
        return q // MILLI, MILLI
    return (f"resources {GPU_MILLI_RESOURCE}: {q} is neither a share of one GPU (1..{MILLI}) "
            f"nor whole GPUs (a multiple of {MILLI})")


def asked_resource(pod: Mapping[str, Any] | None, gpu_resource: str) -> str:
    """The GPU resource a pod asks, for messages that name it: `tidal.dev/gpu-milli`
    when a container (or init container) gives it, else `gpu_resource`."""
    spec = (pod or {}).get("spec") or {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        given = container.get("resources") or {}
        if any(GPU_MILLI_RESOURCE in (given.get(kind) or {}) for kind in ("requests", "limits")):
            return GPU_MILLI_RESOURCE
    return gpu_resource


def unequal_requests(spec: Mapping[str, Any], resources: Iterable[str]) -> list[str]:
    """A problem for each container (init containers too) whose requests and
    limits of one of `resources` are both given and differ."""
    problems = []
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        given = container.get("resources") or {}
        requests, limits = given.get("requests") or {}, given.get("limits") or {}
        for resource in resources:
            if resource in requests and resource in limits and not _equal(requests[resource], limits[resource]):
                problems.append(f"container {container.get('name', '?')}: resources.requests.{resource} "
                                f"{str(requests[resource])!r} must equal its limits {str(limits[resource])!r} "
                                f"(an extended resource)")
    return problems


def _equal(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except QuantityError:
        return True  # reported as a malformed quantity already


def gpu_ask(asks: Asks, counted: int, milli_total: int, gpu_resource: str, problems: list[str]) -> GpuAsk:
    """The pod's `GpuAsk` from its annotations (`asks`), its `gpu_resource`
    count (`counted`) and its `tidal.dev/gpu-milli` total; no ask, and a
    problem added, when a form is malformed or the two disagree."""
    old = _older_form(asks, counted, gpu_resource, problems)
    if old is None:
        return GpuAsk()
    new = gpus_of_milli(milli_total)
    if isinstance(new, str):
        problems.append(new)
        return GpuAsk()
    given_old = counted or asks.gpu_count is not None or asks.gpu_milli is not None
    if milli_total and given_old and old != new:
        problems.append(f"resources {GPU_MILLI_RESOURCE}: {milli_total} asks {_shown(new)}, but the older form "
                        f"({gpu_resource} limits, {GPU_COUNT}, {GPU_MILLI} annotations) asks {_shown(old)}")
        return GpuAsk()
    count, milli = new if milli_total else old
    try:
        return GpuAsk(count=count, milli=milli, models=list(asks.gpu_models), kind=asks.gpu_kind,
                      group=asks.gpu_group)
    except ValidationError as exc:  # guarded above; kept so bad input can never raise
        problems.append(f"gpu ask: {describe_validation_error(exc)}")
        return GpuAsk()


def _shown(ask: tuple[int, int]) -> str:
    count, milli = ask
    if not count:
        return "no GPU"
    return f"{count} whole GPU{'s' if count > 1 else ''}" if milli == MILLI else f"{milli} milli of one GPU"


def _older_form(asks: Asks, counted: int, gpu_resource: str, problems: list[str]) -> tuple[int, int] | None:
    """(count, milli) of the annotations and `gpu_resource` limits, or None
    (a problem added) when they contradict each other."""
    gpu_count = asks.gpu_count
    if gpu_count is not None and counted and gpu_count != counted:
        problems.append(f"annotation {GPU_COUNT}: \"{gpu_count}\" disagrees with the pod's "
                        f"{gpu_resource} limits ({counted})")
        return None
    if gpu_count is None:
        gpu_count = counted or (1 if asks.gpu_milli is not None else 0)
    milli = asks.gpu_milli if asks.gpu_milli is not None else MILLI
    if milli < MILLI and gpu_count > 1:
        problems.append(f"annotation {GPU_MILLI}: \"{milli}\" is a share of one GPU, "
                        f"but {GPU_COUNT} is {gpu_count} (must be 1)")
        return None
    return gpu_count, milli
