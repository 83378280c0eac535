"""Fair-share scores (SPEC §C): exponentially decayed usage per user and per
resource type. More usage → higher score → lower priority.

The recurrence, with Δt the time since the previous update and T the
adjustment time::

    s(t) = e^(−Δt/T) · s(t − Δt) + (1 − e^(−Δt/T)) · g(t)

is the discrete form of convolving the usage g with c·e^(−t/T). After a step
in g the tracking error |s − g| / |step| is e^(−k) after k·T: 36.8 % after T,
13.5 % after 2T, 1.8 % after 4T. Operators think in "4T" (the time after
which history no longer matters, default 7 days), so settings carry 4T and
`adjust_time_from_settle_time` converts.

Resource types are GPU model names, the generic GPU type "gpu" (all models
together), "cpu" and "memory"; usage is in the Tidal units of each
(milli-GPU, milli-CPU, MiB), and so is the score. A pod's GPUs count both
under their model and under "gpu": a pod asking for one model is ordered by
its user's usage of that model, a pod that takes any model by the user's
usage of all GPUs (the key is `tidal_schemas.resource_type`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tidal_schemas import GPU_TYPE, UserScore

DEFAULT_SETTLE_TIME_S = 7 * 86400.0
"""Default 4T: history older than a week weighs under 2 %."""

CPU = "cpu"
MEMORY = "memory"

Key = tuple[str, str]
"""(user, resource type)."""


def adjust_time_from_settle_time(settle_time_s: float) -> float:
    """T from "4T", the settle time operators configure: T = 4T / 4."""
    if not settle_time_s > 0:
        raise ValueError(f"settle time (4T) must be positive, got {settle_time_s}")
    return settle_time_s / 4.0


DEFAULT_ADJUST_TIME_S = adjust_time_from_settle_time(DEFAULT_SETTLE_TIME_S)  # 1.75 days


def _check_adjust_time(adjust_time_s: float) -> None:
    if not adjust_time_s > 0:
        raise ValueError(f"adjust time T must be positive, got {adjust_time_s}")


def decay(score: float, usage: float, dt_s: float, adjust_time_s: float) -> float:
    """One update: s ← e^(−Δt/T)·s + (1 − e^(−Δt/T))·g, with g = `usage`,
    Δt = `dt_s`, T = `adjust_time_s`. Δt = 0 leaves the score unchanged."""
    _check_adjust_time(adjust_time_s)
    if dt_s < 0:
        raise ValueError(f"dt_s must not be negative, got {dt_s}")
    keep = math.exp(-dt_s / adjust_time_s)
    # -expm1(-x) is 1 - e^(-x) without cancellation when Δt ≪ T.
    return keep * score + -math.expm1(-dt_s / adjust_time_s) * usage


def initial_score(pods: Iterable[tuple[float, float]], adjust_time_s: float) -> float:
    """First-run score of a user with running pods but no record:
    Σ u·(1 − e^(−r/T)) over its pods (usage u, run time r in seconds) — each
    pod's share as if the score had been tracking it since it started."""
    _check_adjust_time(adjust_time_s)
    # summed exactly (then rounded once): the same score whatever order the pods come in
    return math.fsum(-math.expm1(-max(run_s, 0.0) / adjust_time_s) * usage for usage, run_s in pods)


def catch_up(score: float, usage: float, last_update: datetime, now: datetime, adjust_time_s: float) -> float:
    """Restart rule: one update with Δt = now − last_update. A `now` before
    `last_update` (clock skew, a replayed event) counts as Δt = 0."""
    dt_s = max((now - last_update).total_seconds(), 0.0)
    return decay(score, usage, dt_s, adjust_time_s)


@dataclass(frozen=True, slots=True)  # one per running pod of the cluster: no __dict__ each
class RunningPod:
    """What a running pod holds, for fair share: milli-GPU per model of the
    GPUs it was given (`GPU_TYPE` for GPUs of unknown model)."""

    user: str
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: Mapping[str, int] = field(default_factory=dict)
    started_at: datetime | None = None


def pod_usage(pod: RunningPod) -> dict[str, float]:
    """The pod's usage per resource type. GPUs are charged to their model
    and to the generic "gpu" as well (once when the model is unknown)."""
    usage = {CPU: float(pod.cpu_milli), MEMORY: float(pod.memory_mib)}
    for model, milli in pod.gpus.items():
        for kind in {model, GPU_TYPE}:
            usage[kind] = usage.get(kind, 0.0) + float(milli)
    return {kind: amount for kind, amount in usage.items() if amount > 0}


def usage_by_resource_type(running_pods: Iterable[RunningPod]) -> dict[Key, float]:
    """Per (user, resource type), what the user's running pods hold: GPU
    milli by model and in all under "gpu", "cpu" in milli-CPU, "memory" in
    MiB. Zero amounts are left out (a missing key means no usage)."""
    totals: dict[Key, float] = {}
    for pod in running_pods:
        for kind, amount in pod_usage(pod).items():
            totals[(pod.user, kind)] = totals.get((pod.user, kind), 0.0) + amount
    return totals


def run_times_by_resource_type(running_pods: Iterable[RunningPod],
                               now: datetime) -> dict[Key, list[tuple[float, float]]]:
    """Per (user, resource type), the (usage, run time s) of each running pod,
    the input of `initial_score`. A pod without a start time has run 0 s."""
    found: dict[Key, list[tuple[float, float]]] = {}
    for pod in running_pods:
        run_s = max((now - pod.started_at).total_seconds(), 0.0) if pod.started_at else 0.0
        for kind, amount in pod_usage(pod).items():
            found.setdefault((pod.user, kind), []).append((amount, run_s))
    return found


def first_run_scores(running_pods: Iterable[RunningPod], now: datetime, adjust_time_s: float) -> dict[Key, float]:
    """`initial_score` per (user, resource type) of `running_pods` at `now`,
    one user's run times at a time: a scoring service started beside a
    running cluster reads every user's pods at its first update (150,000 at
    5,000 nodes), and their run times all at once were 30 MiB more at its peak."""
    by_user: dict[str, list[RunningPod]] = {}
    for pod in running_pods:
        by_user.setdefault(pod.user, []).append(pod)
    return {key: initial_score(runs, adjust_time_s)
            for pods in by_user.values() for key, runs in run_times_by_resource_type(pods, now).items()}


@dataclass(frozen=True)
class ScoreRecord:
    """A stored score: its value, the usage it last saw, when it was updated."""

    score: float
    usage: float
    updated_at: datetime


class FairShareBook:
    """Scores of every (user, resource type), advanced on each period.

    Deterministic: the result depends only on the records and the
    `advance` calls, so replicas fed the same events agree exactly. Keys
    without usage decay toward 0 and are dropped once below `prune_below`.
    """

    def __init__(self, adjust_time_s: float = DEFAULT_ADJUST_TIME_S, prune_below: float = 1e-6) -> None:
        _check_adjust_time(adjust_time_s)
        self.adjust_time_s = adjust_time_s
        self.prune_below = prune_below
        self._records: dict[Key, ScoreRecord] = {}

    def restore(self, user: str, resource_type: str, record: ScoreRecord) -> None:
        """Load a persisted record (e.g. a replayed `score.user`); the next
        `advance` then catches it up with Δt = time since `updated_at`."""
        self._records[(user, resource_type)] = record

    def restore_published(self, published: UserScore) -> None:
        """`restore` from a `score.user` event, as when replaying the stream
        after a restart. The book's own T applies from here on."""
        self.restore(published.user, published.resource_type,
                     ScoreRecord(score=published.score, usage=published.usage, updated_at=published.updated_at))

    def get(self, user: str, resource_type: str) -> ScoreRecord | None:
        """The record of one key, or None when the book has none."""
        return self._records.get((user, resource_type))

    def forget(self, which: Callable[[str, str], bool]) -> None:
        """Drop the records of keys for which `which(user, resource_type)` holds."""
        for key in [k for k in self._records if which(*k)]:
            del self._records[key]

    def records(self) -> dict[Key, ScoreRecord]:
        """A copy of every record, for snapshots."""
        return dict(self._records)

    def advance(
        self,
        now: datetime,
        usage_by_key: Mapping[Key, float],
        first_run: Mapping[Key, float] | None = None,
    ) -> list[UserScore]:
        """Apply the periodic update at `now` to every key in the book or in
        `usage_by_key`, and return the new scores sorted by key.

        Known key: `catch_up` with its current usage (0 when absent).
        New key: `first_run[key]`, the `initial_score` of its pods' usage and
        run times (`first_run_scores`); without one it starts at 0, as a pod
        that has just started would. Keys with no usage whose score fell below
        `prune_below` are dropped and not returned.
        """
        first_run = first_run or {}
        updates: list[UserScore] = []
        for key in sorted(set(self._records) | set(usage_by_key)):
            usage = float(usage_by_key.get(key, 0.0))
            record = self._records.get(key)
            if record is None:
                score = first_run.get(key, 0.0)
            else:
                score = catch_up(record.score, usage, record.updated_at, now, self.adjust_time_s)
            if usage == 0 and score < self.prune_below:
                self._records.pop(key, None)
                continue
            # A late `now` must not move a record back in time: the next
            # update would otherwise count the same interval twice.
            stamp = now if record is None else max(now, record.updated_at)
            self._records[key] = ScoreRecord(score=score, usage=usage, updated_at=stamp)
            updates.append(UserScore(user=key[0], resource_type=key[1], score=score, usage=usage,
                                     updated_at=stamp, adjust_time_s=self.adjust_time_s))
        return updates

    def advance_running(self, now: datetime, running_pods: Sequence[RunningPod]) -> list[UserScore]:
        """`advance` from the pods running at `now`: their usage per key, and
        their run times for keys the book has never seen (first-run rule)."""
        return self.advance(now, usage_by_resource_type(running_pods), first_run_scores(running_pods, now, self.adjust_time_s))
