"""The table of pods holding resources, per cluster, from pod lifecycle
events: what fair share charges each user for."""

from __future__ import annotations

import sys
from types import MappingProxyType

from tidal_schemas import HOLDING_PHASES, GPU_TYPE, PodLifecycle, resource_type

from .fairshare import Key, RunningPod, pod_usage

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
    """Pods holding resources, per cluster and namespace/name, and what they
    hold in all per (user, resource type), kept as pods come and go: the
    periodic fair-share update reads the totals, not every pod (150,000 pods
    cost it 0.6 s of CPU a period, the event loop held that long). The amounts
    are whole milli-CPU, MiB and milli-GPU, so the totals are exact whatever
    the order. Foreign pods (another scheduler's) are left out: their users
    do not compete in Tidal's queue, so fair share has nothing to order for
    them."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, RunningPod]] = {}  # cluster -> pod key -> pod
        self._usage: dict[str, dict[Key, float]] = {}  # cluster -> (user, resource type) -> held in all

    def apply(self, cluster: str, pod: PodLifecycle) -> None:
        pods, key = self._pods.setdefault(cluster, {}), pod.event_key()
        gone = pods.pop(key, None)
        if gone is not None:
            self._charge(cluster, gone, -1.0)
        if pod.phase in HOLDING_PHASES and not pod.foreign:
            pods[key] = running = running_pod(pod)
            self._charge(cluster, running, 1.0)
        if not pods:
            del self._pods[cluster]

    def _charge(self, cluster: str, pod: RunningPod, sign: float) -> None:
        totals = self._usage.setdefault(cluster, {})
        for kind, amount in pod_usage(pod).items():
            left = totals.get((pod.user, kind), 0.0) + sign * amount
            if left:
                totals[(pod.user, kind)] = left
            else:  # no usage left: no key, as usage_by_resource_type leaves it out
                del totals[(pod.user, kind)]
        if not totals:
            del self._usage[cluster]

    def clusters(self) -> list[str]:
        return sorted(self._pods)

    def of_cluster(self, cluster: str) -> list[RunningPod]:
        return list(self._pods.get(cluster, {}).values())

    def usage(self, cluster: str) -> dict[Key, float]:
        """`usage_by_resource_type` of the cluster's pods, as kept."""
        return dict(self._usage.get(cluster, {}))
