"""What placement's scheduling metrics compute, as pure functions over plain
data: the reason category a pending pod is counted under, the
kube-scheduler queue and attempt result it is counted under, GPU allocation
and fragmentation per model from the cache's device arrays, and the
pending-to-bound clock. The Prometheus wiring is `metrics.py`.

kube-scheduler's queues, and the state of a Tidal queue entry counted under each
(`scheduler_pending_pods{queue}`):

    active         tried at the next cycle: new, changed, back from the
                   waiting queue (permit expired), or room appeared since
                   its last attempt, and its back-off is over
    backoff        would be tried without any new event, once its back-off
                   ends (kube-scheduler's backoffQ)
    unschedulable  tried and waiting for an event to be tried again (room
                   appearing, its tenant's configuration changing), or held
                   back behind a better waiting pod of its resource type
                   (a PreFilter rejection in kube-scheduler's words)
    gated          none: Tidal honours no scheduling gates (`spec.schedulingGates`);
                   exported as 0 so that queries over the four queues hold

Attempt results (`scheduler_schedule_attempts_total{result}`) from the
cycle's status codes: placed → scheduled; unschedulable, unresolvable and
wait (held back) → unschedulable, as kube-scheduler counts a Filter or
PreFilter rejection; error → error.

Reason categories are a small fixed set (label values must not be free
text, or every distinct message becomes a time series):

    invalid     the pod itself is malformed (its `invalid_reason`)
    waiting     held back behind a higher-priority pod of its resource type
    quota       refused by its tenant's quota
    permission  refused by its tenant's permissions, or no permitted node
    cpu memory gpu gpu-model numa
                no node has the room: the filter stage that counted out the
                most nodes (kube-scheduler's "Insufficient cpu")
    taint       nodes take no new pods (the stop-scheduling taint …)
    stale       nodes sent no metrics for too long
    gpu-group   no GPU group of its tenant has room (§B)
    new         not tried yet
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tidal_schemas.filters import NODE_FILTERS

from .cluster_arrays import GPU_MILLI
from .pod_request import ERROR, PLACED, UNRESOLVABLE, UNSCHEDULABLE, WAIT

REASONS = ("invalid", "waiting", "quota", "permission", "cpu", "memory", "gpu", "gpu-model", "numa", "taint",
           "stale", "gpu-group", "new")

# decide.py's filter stage names -> category; any other stage is a reason
# the node takes no new pods (`ClusterState.blocked_masks`).
STAGES = {name: f.category for name, f in NODE_FILTERS.items()}  # filter -> pending category


def pending_reason(*, reason: str, filtered: Mapping[str, int], refused: bool, invalid: bool,
                   held_back: bool, stale_stage: str) -> str:
    """The category (one of REASONS) a pending pod is counted under.

    Checked in this order: an invalid pod, a pod held back (it was not
    tried), a refusal by a rule, then the filter stage that counted out
    the most nodes (ties to the first in `filtered`'s order, which is the
    filter's order). `stale_stage` is the blocked-node reason staleness
    uses. A refusal names its rule as the first word of its reason
    (tenancy.py: "permission: …" / "quota: …"), the one place text is read.
    """
    if invalid:
        return "invalid"
    if held_back:
        return "waiting"
    if refused:
        return "permission" if reason.startswith("permission") else "quota"
    if filtered:
        stage = max(filtered, key=lambda k: filtered[k])  # max keeps the first of equal counts
        return STAGES.get(stage, "stale" if stage == stale_stage else "taint")
    return "gpu-group" if reason else "new"


QUEUES = ("active", "backoff", "unschedulable", "gated")

RESULTS = {PLACED: "scheduled", UNSCHEDULABLE: "unschedulable", UNRESOLVABLE: "unschedulable",
           WAIT: "unschedulable", ERROR: "error"}  # attempt status code -> kube-scheduler's result


def kube_queue(*, held_back: bool, due_now: bool, due_later: bool) -> str:
    """The kube-scheduler queue (one of QUEUES) a pending pod is counted in:
    held back → unschedulable; else tried at the next cycle (`due_now`) →
    active; else tried once its back-off ends with no event needed
    (`due_later`) → backoff; else unschedulable."""
    if held_back:
        return "unschedulable"
    if due_now:
        return "active"
    return "backoff" if due_later else "unschedulable"


def kube_result(code: str) -> str:
    """kube-scheduler's attempt result for a cycle status code (RESULTS);
    an unknown code is an error, not a new label value."""
    return RESULTS.get(code, "error")


@dataclass(frozen=True)
class GpuModelUse:
    """Milli-GPUs of one model: healthy capacity, allocated, and free on
    GPUs partly allocated (usable by shares only, never by a whole-GPU pod)."""

    capacity: int
    allocated: int
    fragmented: int


def gpu_use_by_model(valid: np.ndarray, free: np.ndarray, model: np.ndarray, present: np.ndarray,
                     models: Sequence[str]) -> dict[str, GpuModelUse]:
    """Per model name, over healthy devices of present rows (rows × device
    columns; `model` holds ids into `models`, −1 for none):

        capacity   = 1000 · #devices
        allocated  = Σ (1000 − free_g)
        fragmented = Σ free_g · [0 < free_g < 1000]
    """
    ok = valid & present[:, None] & (model >= 0)
    ids, f = model[ok], free[ok]
    out = {}
    for k in np.unique(ids):
        mine = f[ids == k]
        out[models[int(k)]] = GpuModelUse(capacity=GPU_MILLI * mine.size, allocated=int((GPU_MILLI - mine).sum()),
                                          fragmented=int(mine[(mine > 0) & (mine < GPU_MILLI)].sum()))
    return out


class PendingClock:
    """When each pod was first seen pending, by event time, so that the
    time to its good bind is measured: `bound` gives the seconds, once."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}

    def pending(self, key: str, at: float) -> None:
        """The pod was seen pending at `at` (the first sighting counts)."""
        self.since.setdefault(key, at)

    def bound(self, key: str, at: float) -> float | None:
        """Seconds from first seen pending to the good bind at `at`, or None
        if it was not seen pending (a bind read twice counts once)."""
        start = self.since.pop(key, None)
        return None if start is None else max(0.0, at - start)

    def forget(self, key: str) -> None:
        self.since.pop(key, None)
