"""The table of pods holding resources, per cluster, from pod lifecycle
events: what fair share charges each user for."""

from __future__ import annotations

import sys
from types import MappingProxyType

from tidal_schemas import HOLDING_PHASES, GPU_TYPE, PodLifecycle, resource_type

from .fairshare import RunningPod

NO_GPUS = MappingProxyType({})  # shared by every pod without GPUs (most): one empty mapping, not one each


def running_pod(pod: PodLifecycle) -> RunningPod:
    """What a bound or running pod holds: milli-GPU per model of the GPUs it
    was given. A GPU whose event names no model is of the one model the pod
    asked for, if it asked for exactly one (the same rule as the queue's
    `resource_type`), else of unknown model ("gpu"); a pod with a GPU ask
    but no GPUs named yet is charged its ask the same way. Fair share then
    charges every GPU to its model and to "gpu" (`fairshare._pod_usage`)."""
    fallback = resource_type(pod) if pod.gpu.count else GPU_TYPE
    gpus: dict[str, int] = {}
    for share in pod.gpus:
        model = share.model or fallback
        gpus[model] = gpus.get(model, 0) + share.milli
    if not gpus and pod.gpu.total_milli:
        gpus[fallback] = pod.gpu.total_milli
    return RunningPod(user=sys.intern(pod.user), cpu_milli=pod.requests.cpu_milli,
                      memory_mib=pod.requests.memory_mib, gpus=gpus or NO_GPUS,
                      started_at=pod.started_at or pod.created_at)


class RunningPods:
    """Pods holding resources, keyed by (cluster, namespace/name). Foreign
    pods (another scheduler's) are left out: their users do not compete in
    Tidal's queue, so fair share has nothing to order for them."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], RunningPod] = {}

    def apply(self, cluster: str, pod: PodLifecycle) -> None:
        key = (cluster, pod.event_key())
        if pod.phase in HOLDING_PHASES and not pod.foreign:
            self._pods[key] = running_pod(pod)
        else:
            self._pods.pop(key, None)

    def clusters(self) -> list[str]:
        return sorted({cluster for cluster, _ in self._pods})

    def of_cluster(self, cluster: str) -> list[RunningPod]:
        return [pod for (c, _), pod in sorted(self._pods.items()) if c == cluster]
