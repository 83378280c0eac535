"""A Pod object of the Kubernetes API (its JSON, as a dict) → `PodLifecycle`
(pure). Never raises on bad input: what cannot be understood goes into
`invalid_reason`, which makes the pod unschedulable until fixed.

Phase:  deleted (a DELETED watch event) or status Succeeded/Failed → deleted;
        status Running → running; spec.nodeName set → bound; else pending.

Requests, per resource r (what the API server itself uses, `PodRequests`):

    request(c, r) = c.resources.requests[r], else c.resources.limits[r], else 0
    sidecars      = Σ request(i, r) over init containers with restartPolicy Always
    init_peak     = max over init containers i, in order, of
                    (sidecars started before i) + request(i, r)
    total(r)      = max(Σ request(c, r) over containers + sidecars, init_peak) + overhead[r]

CPU in milli-CPU, memory in MiB (both rounded up). GPUs (gpu_ask.py): the
total of the extended resource `tidal.dev/gpu-milli` by the same formula, or
the older form, a count of `nvidia.com/gpu` (configurable) with annotations.

Whose pods: every pod is read, Tidal's (spec.schedulerName is ours) and
foreign ones (`foreign`: another scheduler's, a DaemonSet's, a static pod),
because everything bound to a node consumes it. Foreign pods live in the
shared CPU pool: they never hold exclusive CPUs, whatever they ask.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from tidal_schemas import HOLDING_PHASES, GpuAsk, PodLifecycle, Resources
from tidal_schemas.common import MAX_INT
from tidal_schemas.decision_codec import PREFIX, read_decision
from tidal_schemas.envelope import describe_validation_error

from .annotations import EXCLUSIVE_CPUS, Asks, parse_asks
from .gpu_ask import GPU_MILLI_RESOURCE, gpu_ask, unequal_requests
from .quantity import QuantityError, count, cpu_milli, memory_mib, parse_quantity

GPU_RESOURCE = "nvidia.com/gpu"
SYSTEM_CRITICAL = frozenset({"system-node-critical", "system-cluster-critical"})
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def pod_phase(pod: Mapping[str, Any], deleted: bool = False) -> str:
    """The Tidal phase of a pod (see the module docstring)."""
    phase = (pod.get("status") or {}).get("phase")
    node = (pod.get("spec") or {}).get("nodeName")
    if deleted or phase in ("Succeeded", "Failed"):
        return "deleted"
    if phase == "Running" and node:
        return "running"
    return "bound" if node else "pending"


def kubelet_admitted(pod: Mapping[str, Any]) -> bool:
    """Whether a bound pod's kubelet has taken it in: it sets `status.startTime`
    once admitted, and the phase Failed when it refuses the pod."""
    status = pod.get("status") or {}
    return bool(status.get("startTime")) or status.get("phase") in ("Running", "Succeeded", "Failed")


def _request(container: Mapping[str, Any], resource: str, unit, problems: list[str]) -> int:
    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        raw = (resources.get(kind) or {}).get(resource)
        if raw is not None:
            try:
                return unit(raw)
            except QuantityError:
                problems.append(f"container {container.get('name', '?')}: resources.{kind}.{resource} "
                                f"{str(raw)!r} is not a Kubernetes quantity")
                return 0
    return 0


def total_request(spec: Mapping[str, Any], resource: str, unit, problems: list[str]) -> int:
    """total(resource) of a pod spec, by the formula of the module docstring,
    in `unit`; 0 and a problem added when a quantity is malformed or the
    total is beyond what an event can carry."""
    main = sum(_request(c, resource, unit, problems) for c in spec.get("containers") or [])
    sidecars = init_peak = 0
    for init in spec.get("initContainers") or []:
        amount = _request(init, resource, unit, problems)
        if init.get("restartPolicy") == "Always":
            sidecars += amount
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + amount)
    overhead = 0
    raw = (spec.get("overhead") or {}).get(resource)
    if raw is not None:
        try:
            overhead = unit(raw)
        except QuantityError:
            problems.append(f"spec.overhead.{resource} {str(raw)!r} is not a Kubernetes quantity")
    total = max(main + sidecars, init_peak) + overhead
    if total > MAX_INT:  # each quantity fits, their sum may not: refuse it, never wrap
        problems.append(f"resources.{resource}: the pod's total request is beyond what an event can carry")
        return 0
    return total


def pod_requests(spec: Mapping[str, Any], gpu_resource: str = GPU_RESOURCE) -> tuple[Resources, int, list[str]]:
    """(cpu/memory requests, `gpu_resource` count, problems) of a pod spec,
    by the formula of the module docstring."""
    problems: list[str] = []
    cpu, memory, gpus = (total_request(spec, resource, unit, problems)
                         for resource, unit in (("cpu", cpu_milli), ("memory", memory_mib), (gpu_resource, count)))
    return Resources(cpu_milli=cpu, memory_mib=memory), gpus, problems


def kube_qos_class(pod: Mapping[str, Any]) -> str:
    """status.qosClass, or computed like the API server when absent:
    Guaranteed when every container has CPU and memory limits equal to its
    requests; BestEffort when none asks for any; else Burstable."""
    given = (pod.get("status") or {}).get("qosClass")
    if given:
        return given
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    asked, guaranteed = False, bool(containers)
    for c in containers:
        resources = c.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        for r in ("cpu", "memory"):
            asked |= r in limits or r in requests
            if r not in limits or not _same(requests.get(r, limits[r]), limits[r]):
                guaranteed = False
    if not asked:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _same(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except QuantityError:
        return False


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None  # RFC 3339, as Kubernetes reads it: the zone is not optional


def read_pod(pod: Mapping[str, Any], *, deleted: bool = False, gpu_resource: str = GPU_RESOURCE,
             scheduler_name: str = "tidal") -> tuple[PodLifecycle, str | None]:
    """The `PodLifecycle` of a Pod object, and why what a bound pod holds
    could not be read back (None when it could, or it holds nothing that
    needs its decision). Malformed Tidal keys or quantities set
    `invalid_reason` (all problems, '; '-joined) instead of raising.

    A pod of another scheduler is `foreign`: its Tidal keys are not read
    (they are not asks to us), only its requests, which its node must count.
    A bound Tidal pod carries what it holds, read back from the decision
    written on it (`tidal_schemas.decision_codec`)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    foreign = spec.get("schedulerName", "default-scheduler") != scheduler_name
    asks = Asks() if foreign else parse_asks(meta.get("annotations"), labels)
    problems = list(asks.problems)
    requests, gpus, quantity_problems = pod_requests(spec, gpu_resource)
    problems += quantity_problems
    exclusive = bool(asks.exclusive_cpus)
    if exclusive and (requests.cpu_milli == 0 or requests.cpu_milli % 1000):
        problems.append(f"annotation {EXCLUSIVE_CPUS}: \"true\" needs whole, non-zero CPU requests, "
                        f"got {requests.cpu_milli}m")
        exclusive = False
    problems += unequal_requests(spec, (gpu_resource, GPU_MILLI_RESOURCE))
    gpu = gpu_ask(asks, gpus, total_request(spec, GPU_MILLI_RESOURCE, count, problems), gpu_resource, problems)
    qos = asks.qos or ("LS" if kube_qos_class(pod) == "Guaranteed" else "BE")
    phase = pod_phase(pod, deleted)
    namespace = meta.get("namespace") or "default"
    fields = dict(
        namespace=namespace, name=meta.get("name") or "?", uid=meta.get("uid") or "", phase=phase,
        node=spec.get("nodeName") or None, requests=requests, exclusive_cpus=exclusive,
        cpu_policy=asks.cpu_policy, gpu=gpu, tenant=asks.tenant or namespace, user=asks.user or "default",
        qos=qos, priority=_int(spec.get("priority")),
        system_critical=spec.get("priorityClassName") in SYSTEM_CRITICAL, evictable=bool(asks.evictable),
        created_at=_time(meta.get("creationTimestamp")) or EPOCH, started_at=_time(status.get("startTime")),
        labels=labels, foreign=foreign,
    )
    unread = None
    if phase in HOLDING_PHASES and not foreign:
        held, unread = read_decision(meta.get("annotations"))
        if held is not None:
            fields.update(decision_id=held.decision_id, numa_cpus=held.numa_cpus, gpus=list(held.gpus))
        elif unread is None and (gpu.count or exclusive):
            unread = "bound without a Tidal decision"
        if unread:
            unread += ": its GPUs and exclusive CPUs are accounted by its requests, on devices Tidal cannot name"
    try:
        return PodLifecycle(**fields, invalid_reason="; ".join(problems) or None), unread
    except ValidationError as exc:  # the checks above should prevent this; never crash on input
        problems.append(describe_validation_error(exc))
        fields.update(exclusive_cpus=False, gpu=GpuAsk(), priority=0, numa_cpus={}, gpus=[], decision_id="")
        return PodLifecycle(**fields, invalid_reason="; ".join(problems)), unread


# What of a Pod object `read_pod` and the binder read (`binder.check_pod`, the
# Scheduled Event's involvedObject): the bridge's watch keeps every pod of the
# cluster, so it keeps only this (`slim_pod`).
_KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                  "labels", "annotations")
_KEPT_SPEC = ("nodeName", "schedulerName", "priority", "priorityClassName", "overhead")
_KEPT_CONTAINER = ("name", "resources", "restartPolicy")
_KEPT_STATUS = ("phase", "qosClass", "startTime")


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` as the bridge's watch keeps it: what `read_pod` and the binder
    read, and no more (a running pod's containers, volumes, conditions and
    container statuses are most of its bytes, and of its annotations only
    Tidal's are read: `kubectl apply` alone leaves a copy of the manifest in
    one). `read_pod` reads the kept pod as the whole one
    (tests/test_props_annotations.py)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    kept_meta = {k: meta[k] for k in _KEPT_METADATA if k in meta}
    if isinstance(kept_meta.get("annotations"), dict):  # anything else is kept for read_pod to refuse
        kept_meta["annotations"] = {k: v for k, v in kept_meta["annotations"].items()
                                    if isinstance(k, str) and k.startswith(PREFIX)}
    kept_spec = {k: spec[k] for k in _KEPT_SPEC if k in spec}
    for containers in ("containers", "initContainers"):
        if containers in spec:
            kept_spec[containers] = [{k: c[k] for k in _KEPT_CONTAINER if k in c} for c in spec[containers] or []]
    return {"metadata": kept_meta, "spec": kept_spec, "status": {k: status[k] for k in _KEPT_STATUS if k in status}}


def kept_pod(pod: dict[str, Any]) -> str:
    """`slim_pod(pod)` as the watch keeps it: compact JSON text (ASCII, one
    byte a character), read back by `read_kept_pod`. The nested dicts of a
    slim pod take about 2.6 KB, the text about 600 bytes, for each pod of
    the cluster. `json` both ways, as the watch reads its lines: exact for
    whatever `json.loads` gave (NaN, integers past 64 bits, lone surrogates)."""
    return json.dumps(slim_pod(pod), separators=(",", ":"))


read_kept_pod = json.loads


def payload_digest(pod: PodLifecycle) -> bytes:
    """128 bits that differ when the pod event's payload does: what the
    bridge keeps to tell an unchanged pod (not republished) from a changed one."""
    return hashlib.blake2b(pod.model_dump_json().encode(), digest_size=16).digest()


def pod_lifecycle(pod: Mapping[str, Any], *, deleted: bool = False, gpu_resource: str = GPU_RESOURCE,
                  scheduler_name: str = "tidal") -> PodLifecycle:
    """The `PodLifecycle` of a Pod object (see `read_pod`)."""
    return read_pod(pod, deleted=deleted, gpu_resource=gpu_resource, scheduler_name=scheduler_name)[0]
