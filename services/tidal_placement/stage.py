"""Placement as a stage: what it keeps and decides, from what it read, with
no I/O and no clock of its own.

Every step that changes what placement knows goes through one method here,
with the time it is taken at: an input applied (`read`), the leader
partition moving (`elected`), fences claimed (`claim`), a scheduling cycle
(`decide`), binds timed out (`expire_binds`), stale nodes looked for
(`check_stale`). Each step is written to the cluster's journal in the order
taken (tidal_schemas.journal), and `replay.py` runs the same steps on a
fresh stage: the same steps at the same times give the same decisions.

The service is the adapter around it: it reads the streams, keeps the
clock, publishes what `decide` and `claim` return and the journal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tidal_runtime.journal import Journal
from tidal_schemas import PlacementDecision, PlacementDecisions
from tidal_schemas.fence import fence_decision

from .cache import ClusterCache
from .cycle import cycle, in_events
from .leadership import Leadership
from .learning import StrategyLearner
from .pod_traces import PodTraces
from .settings import PlacementSettings


class PlacementStage:
    def __init__(self, settings: PlacementSettings, member: str | Callable[[], str] = "") -> None:
        self.settings = settings
        # whose decisions are ours: the bus member id, read when needed (a service's bus connects after it is made)
        self._member = member if callable(member) else (lambda: member)
        self.clusters: dict[str, ClusterCache] = {}
        self.leadership = Leadership(settings.takeover_settle_s)
        self.learner = StrategyLearner(settings.gpu_strategy, settings.workload_refresh, settings.workload_drift)
        self.traces = PodTraces()
        self.journal = Journal()

    def cluster(self, name: str) -> ClusterCache:
        if name not in self.clusters:
            s = self.settings
            self.clusters[name] = ClusterCache(name, s.permit_timeout_s, s.node_stale_after_s, self.learner.observe,
                                               (s.retry_backoff_s, s.retry_backoff_max_s))
        return self.clusters[name]

    @property
    def member(self) -> str:
        return self._member()

    @property
    def active(self) -> set[str]:
        return self.leadership.active

    def _step(self, cluster: str, op: str, now: float, a: str = "") -> None:
        self.journal.step(cluster, op, now, a)

    def _step_everywhere(self, op: str, now: float, a: str = "") -> None:
        for name in self.known():
            self._step(name, op, now, a)

    def known(self) -> list[str]:
        """Every cluster this replica keeps or is configured for."""
        return sorted({*self.clusters, *(self.settings.handled_clusters() or ())})

    # -- the steps --------------------------------------------------------------
    def read(self, envelope: Any, now: float, read_digest: str = "") -> bool:
        """Apply one input; whether the scheduling cycle should run again.
        `read_digest` (`digest` of the bytes read) lets a replay tell that
        it reads the same event, not only one of the same id."""
        self.journal.read(envelope, now, read_digest)
        cache, p = self.cluster(envelope.cluster), envelope.payload
        self.traces.read(envelope)
        if not isinstance(p, PlacementDecisions):
            return cache.apply(p, now)
        wake = False
        for decision in p.items:
            admitted = cache.apply_decision(decision, self.member, now)
            if decision.outcome == "fence":
                self.leadership.fence_read(envelope.cluster, decision, admitted, self.member)
                wake = True
        return wake

    def elected(self, gained: bool, lost: bool, now: float) -> None:
        self._step_everywhere("elected", now, "+".join(w for w, on in (("gained", gained), ("lost", lost)) if on))
        self.leadership.assigned(gained, lost, now)

    def claim(self, now: float) -> list[tuple[str, PlacementDecisions]]:
        """The fences to write now, (cluster, event)."""
        clusters = self.known()
        for name in clusters:
            self._step(name, "claim", now)
        fences = {name: cache.fence for name, cache in self.clusters.items()}
        return [(cluster, PlacementDecisions.of(fence_decision(epoch, self.member)))
                for cluster, epoch in self.leadership.claims(clusters, fences, now)]

    def decide(self, name: str, now: float, attempted: Callable[[str], None] = lambda code: None
               ) -> Iterator[list[PlacementDecision]]:
        """One scheduling cycle of cluster `name`: its decisions, an event's
        worth at a time; the caller publishes each before the next is decided."""
        self._step(name, "cycle", now)
        decisions = cycle(self.clusters[name], self.learner.strategy, now, attempted=attempted,
                          repeat_s=self.settings.pending_repeat_s,
                          traced=lambda key, placed: self.traces.fields(name, key, placed))
        for taken in in_events(decisions, self.settings.publish_window):
            self._step(name, "took", now, str(len(taken)))
            yield taken
        self._step(name, "ended", now)

    def expire_binds(self, now: float) -> list[tuple[str, str]]:
        """Roll back the decisions whose bind result is overdue: (cluster, pod key)."""
        rolled = []
        for name, cache in list(self.clusters.items()):
            self._step(name, "binds", now)
            for key in cache.expired_binds(now, self.settings.bind_timeout_s):
                cache.rollback(key, now)
                rolled.append((name, key))
        return rolled

    def check_stale(self, now: float) -> bool:
        """Look for nodes whose samples stopped (or came back); whether any changed."""
        changed = False
        for name, cache in list(self.clusters.items()):
            self._step(name, "stale", now)
            changed |= bool(cache.check_stale(now)[1])
        return changed

