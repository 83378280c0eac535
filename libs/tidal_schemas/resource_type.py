"""The resource type a pod competes for (§C): the one key under which fair
share scores a user's usage and the scheduling queue orders and holds back
pods. Scoring, placement's queue and `tidal explain` all read it here."""

from __future__ import annotations

from .pod import PodLifecycle

CPU_TYPE = "cpu"
GPU_TYPE = "gpu"
"""The generic GPU type: all GPU models together."""


def resource_type(pod: PodLifecycle) -> str:
    """What `pod` competes for:

    - a GPU pod constrained to exactly one model: that model ("A100");
    - a GPU pod that names no model, or several: the generic type "gpu".
      A multi-model ask can take any of its models, so it competes with
      every GPU user, not with the users of one model: it is ordered by the
      user's usage of all GPUs together, and it waits (and holds back) only
      among the other pods that are not tied to one model;
    - a pod without GPUs: "cpu".

    Scoring charges a running pod's GPUs both to their model and to "gpu"
    (`tidal_scoring.running`), so either key finds the usage it orders by.
    """
    if not pod.gpu.count:
        return CPU_TYPE
    return pod.gpu.models[0] if len(pod.gpu.models) == 1 else GPU_TYPE
