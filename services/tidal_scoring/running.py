"""The table of pods holding resources, per cluster, from pod lifecycle
events: what fair share charges each user for."""

from __future__ import annotations

from tidal_schemas import PodLifecycle

from .fairshare import RunningPod

HOLDING_PHASES = ("bound", "running")


def running_pod(pod: PodLifecycle) -> RunningPod:
    """What a bound or running pod holds. GPU usage is charged to the model
    of the GPUs it was given; a pod with a GPU ask but no model known yet is
    charged to the generic type "gpu"."""
    gpu_milli = sum(share.milli for share in pod.gpus) or pod.gpu.total_milli
    model = next((share.model for share in pod.gpus if share.model), None) or ("gpu" if gpu_milli else None)
    return RunningPod(user=pod.user, cpu_milli=pod.requests.cpu_milli, memory_mib=pod.requests.memory_mib,
                      gpu_model=model, gpu_milli=gpu_milli, started_at=pod.started_at or pod.created_at)


class RunningPods:
    """Pods holding resources, keyed by (cluster, namespace/name)."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], RunningPod] = {}

    def apply(self, cluster: str, pod: PodLifecycle) -> None:
        key = (cluster, pod.event_key())
        if pod.phase in HOLDING_PHASES:
            self._pods[key] = running_pod(pod)
        else:
            self._pods.pop(key, None)

    def clusters(self) -> list[str]:
        return sorted({cluster for cluster, _ in self._pods})

    def of_cluster(self, cluster: str) -> list[RunningPod]:
        return [pod for (c, _), pod in sorted(self._pods.items()) if c == cluster]
