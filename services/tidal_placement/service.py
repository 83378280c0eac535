"""The placement service: wiring only. Every replica follows the streams into one `ClusterCache` per cluster
(cache.py); the replica elected by the single partition of `tenant.config` fences the decision log
(leadership.py) and runs the scheduling cycle (cycle.py) for the clusters it leads, publishing its decisions
`publish_window` to an event, each in its pod's trace (read back from the log as published: `reads_back`).
Each is assumed at once, confirmed by a good bind result, forgotten on a failed bind or timeout.

One clock, injectable (`clock`, wall seconds), for permits, bind timeouts,
takeovers and staleness."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from datetime import datetime, timezone
from functools import partial
from typing import Any

from tidal_bus import Delivery
from tidal_bus.trace_context import carried_by
from tidal_schemas import PlacementDecisions, TenantUsage
from tidal_schemas.fence import fence_decision

from tidal_runtime import Service, Subscription

from .cache import ClusterCache
from .cycle import cycle, in_events
from .leadership import Leadership
from .learning import StrategyLearner
from .metrics import SchedulingMetrics
from .pod_traces import PodTraces
from .settings import PlacementSettings
from .tenant_report import same_usage, tenant_reports

FOLLOWED = ("node.topology", "node.allocatable", "node.status", "score.node", "score.user", "tenant.config",
            "node.action", "pod.lifecycle", "bind.result", "placement.decision", "cpu.assignment")


class PlacementService(Service):
    name = "placement"
    settings_class = PlacementSettings
    produces = ("placement.decision", "tenant.usage")
    reads_back = ("placement.decision",)

    def __init__(self, settings: PlacementSettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.settings: PlacementSettings
        self.clusters: dict[str, ClusterCache] = {}
        self.leadership = Leadership(self.settings.takeover_settle_s)
        self.learner = StrategyLearner(self.settings.gpu_strategy, self.settings.workload_refresh,
                                       self.settings.workload_drift)
        self.caught_up: set[str] = set()
        self.wake = asyncio.Event()
        self.decisions = 0
        self.clock = time.time
        self.reported: dict[tuple[str, str], TenantUsage] = {}  # (cluster, tenant) -> last tenant.usage
        self.scheduling = SchedulingMetrics(self.metrics.registry, lambda: self.clusters, lambda: self.active)
        self.traces = PodTraces()

    # -- wiring ---------------------------------------------------------------
    def subscriptions(self) -> list[Subscription]:
        # The single partition of tenant.config elects the active replica.
        return [Subscription("tenant.config", self._ignore, group=f"{self.default_group()}-leader",
                             on_assign=self.on_leadership, replay_on_assign=False)]

    def loops(self):
        return [*[self._follower(name) for name in FOLLOWED], self.schedule_loop, self.bind_timeouts,
                self.watch_stale_nodes, self.report_tenants]

    async def _ignore(self, envelope: Any, delivery: Delivery) -> None: ...

    def _follower(self, name: str):
        async def follow() -> None:
            async def on_event(envelope: Any) -> None:
                clusters = self.settings.handled_clusters()
                if clusters is None or envelope.cluster in clusters:
                    await self.apply(envelope)

            async def done() -> None:
                self.caught_up.add(name)
                self.wake.set()

            await self.bus.catch_up_then_follow(name, on_event, done)
        follow.__name__ = f"follow_{name.replace('.', '_')}"
        return follow

    def cluster(self, name: str) -> ClusterCache:
        if name not in self.clusters:
            s = self.settings
            self.clusters[name] = ClusterCache(name, s.permit_timeout_s, s.node_stale_after_s, self.learner.observe,
                                               (s.retry_backoff_s, s.retry_backoff_max_s))
        return self.clusters[name]

    @property
    def active(self) -> set[str]:
        return self.leadership.active

    # -- events (every replica) -------------------------------------------------
    async def apply(self, envelope: Any) -> None:
        cache, p, now = self.cluster(envelope.cluster), envelope.payload, self.clock()
        self.scheduling.observe(envelope, counting="bind.result" in self.caught_up)
        self.traces.read(envelope)
        if not isinstance(p, PlacementDecisions):
            if cache.apply(p, now):
                self.wake.set()
            return
        me = self.bus.backend.member_id
        for decision in p.items:
            admitted = cache.apply_decision(decision, me, now)
            if decision.outcome == "fence":
                self.leadership.fence_read(envelope.cluster, decision, admitted, me)
                self.wake.set()

    async def on_leadership(self, gained: frozenset[int], lost: frozenset[int]) -> None:
        self.leadership.assigned(bool(gained), bool(lost), self.clock())
        if gained:
            await self._claim()
            # A claim may have to wait for the takeover to settle: have the loop
            # re-check at its claiming pace now, not at its idle one.
            self.wake.set()

    async def _claim(self) -> None:
        if "placement.decision" not in self.caught_up:
            return
        clusters = {*self.clusters, *(self.settings.handled_clusters() or ())}
        fences = {name: cache.fence for name, cache in self.clusters.items()}
        for cluster, epoch in self.leadership.claims(clusters, fences, self.clock()):
            await self.bus.publish(PlacementDecisions.of(fence_decision(epoch, self.bus.backend.member_id)),
                                   cluster=cluster)

    def held_back(self, cluster: str, key: str) -> bool:
        """Whether the queued pod `key` is held back behind a waiting pod of its type: no
        decision is published for it until that pod goes or its permit expires (for tools)."""
        cache = self.clusters.get(cluster)
        return cache is not None and cache.queue.held_back(key)

    def requested_names(self) -> list:
        """Pods this replica has placed (and not seen deleted)."""
        return [pod for cache in self.clusters.values() for pod in cache.placed_here()]

    # -- deciding (the active replica) ----------------------------------------
    async def schedule_loop(self) -> None:
        while True:
            idle = 0.25 if self.leadership.claiming else self.settings.permit_timeout_s / 2
            # when a waiting pod's back-off ends, its cycle needs no event to wake it
            due = min([c.queue.next_due() or math.inf for n, c in self.clusters.items() if n in self.active] or [math.inf])
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=max(min(idle, due - self.clock()), 0.001))
            self.wake.clear()
            if len(self.caught_up) < len(FOLLOWED):
                continue
            await self._claim()
            for name in sorted(self.active):
                await self.schedule_cluster(name)

    async def schedule_cluster(self, name: str) -> None:
        attempts, strategy = self.scheduling.attempts, self.learner.strategy
        decisions = cycle(self.clusters[name], strategy, self.clock(),
                          attempted=lambda code: attempts.labels(name, code).inc(),
                          repeat_s=self.settings.pending_repeat_s, traced=partial(self.traces.fields, name))
        for taken in in_events(decisions, self.settings.publish_window):
            self.decisions += (placed := sum(d.outcome == "placed" for d in taken))
            self.scheduling.decisions.labels(name, strategy.name).inc(placed)
            await self.publish(PlacementDecisions(items=taken), cluster=name,
                               trace=carried_by(taken[0].trace, taken[0].trace_state))
            if name not in self.active:
                return  # deposed while publishing: the new leader decides the rest

    async def bind_timeouts(self) -> None:
        timeout = self.settings.bind_timeout_s
        while True:
            await asyncio.sleep(min(1.0, timeout / 4))
            now = self.clock()
            for cache in list(self.clusters.values()):
                for key in cache.expired_binds(now, timeout):
                    self.log.warning("no bind result for %s within %.0fs: rolling back", key, timeout)
                    cache.rollback(key, now)
                    self.wake.set()

    async def watch_stale_nodes(self) -> None:
        while True:
            await asyncio.sleep(self.settings.node_stale_check_s)
            for cache in list(self.clusters.values()):
                if cache.check_stale(self.clock())[1]:
                    self.wake.set()

    async def report_tenants(self) -> None:
        """The leader publishes what each tenant holds when it changed."""
        while True:
            await asyncio.sleep(self.settings.tenant_report_s)
            if len(self.caught_up) < len(FOLLOWED):
                continue
            at = datetime.fromtimestamp(self.clock(), timezone.utc)
            for name in sorted(self.active):
                for usage in tenant_reports(self.clusters[name], at) if name in self.clusters else ():
                    if not same_usage(self.reported.get((name, usage.tenant)), usage):
                        await self.publish(usage, cluster=name)
                        self.reported[(name, usage.tenant)] = usage
