"""Builders shared by the workload sources: a pending pod event with a
stable uid."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from tidal_schemas import GpuAsk, PodLifecycle, Resources

_UIDS = uuid.UUID("6a4f3a52-11b8-4d0c-9a0e-5f2a64c1d7b3")
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def pod_uid(namespace: str, name: str, salt: str = "") -> str:
    """A uid derived from the pod's key (and a run salt): the same scenario
    names the same pods the same way."""
    return str(uuid.uuid5(_UIDS, f"{salt}/{namespace}/{name}"))


def pending_pod(namespace: str, name: str, *, cpu_milli: int, memory_mib: int, gpu: GpuAsk = GpuAsk(),
                tenant: str = "default", user: str = "default", qos: str = "BE", priority: int = 0,
                evictable: bool = False, exclusive_cpus: bool = False, cpu_policy: str | None = None,
                labels: dict[str, str] | None = None) -> PodLifecycle:
    """The pending event of a pod (created_at is set again when it arrives)."""
    return PodLifecycle(namespace=namespace, name=name, uid=pod_uid(namespace, name), phase="pending",
                        requests=Resources(cpu_milli=cpu_milli, memory_mib=memory_mib), gpu=gpu, tenant=tenant,
                        user=user, qos=qos, priority=priority, evictable=evictable, exclusive_cpus=exclusive_cpus,
                        cpu_policy=cpu_policy, labels=labels or {}, created_at=EPOCH)
