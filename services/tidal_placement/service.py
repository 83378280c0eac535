"""The placement service: wiring only. Every replica follows the streams into its `PlacementStage`
(stage.py: one `ClusterCache` per cluster, leadership, the strategy); the replica elected by the single
partition of `tenant.config` fences the decision log (leadership.py) and runs the scheduling cycle for the
clusters it leads, publishing its decisions `publish_window` to an event, each in its pod's trace (read
back from the log as published: `reads_back`). Each is assumed at once, confirmed by a good bind result,
forgotten on a failed bind or timeout. Every step the stage takes is published to `stage.journal`.

One clock, injectable (`clock`, wall seconds), for permits, bind timeouts,
takeovers and staleness."""

from __future__ import annotations

import asyncio
import contextlib
import math
from datetime import datetime, timezone
from typing import Any

from tidal_bus import Delivery
from tidal_bus.trace_context import carried_by
from tidal_clock import wall_clock
from tidal_schemas import PlacementDecisions, TenantUsage

from tidal_runtime import Service, Subscription
from tidal_runtime.journal import digest

from .metrics import SchedulingMetrics
from .settings import PlacementSettings
from .stage import PlacementStage
from .tenant_report import same_usage, tenant_reports

FOLLOWED = ("node.topology", "node.allocatable", "node.status", "score.node", "score.user", "tenant.config",
            "node.action", "pod.lifecycle", "bind.result", "placement.decision", "cpu.assignment")


class PlacementService(Service):
    name = "placement"
    settings_class = PlacementSettings
    produces = ("placement.decision", "stage.journal", "tenant.usage")
    reads_back = ("placement.decision",)

    def __init__(self, settings: PlacementSettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.settings: PlacementSettings
        self.stage = PlacementStage(self.settings, lambda: self.bus.backend.member_id)
        self.clusters, self.leadership, self.traces = self.stage.clusters, self.stage.leadership, self.stage.traces
        self.journal = self.stage.journal
        self.caught_up: set[str] = set()
        self.wake = asyncio.Event()
        self.decisions = 0
        self.clock = wall_clock
        self.reported: dict[tuple[str, str], TenantUsage] = {}  # (cluster, tenant) -> last tenant.usage
        self.scheduling = SchedulingMetrics(self.metrics.registry, lambda: self.clusters, lambda: self.active)

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
            async def on_event(envelope: Any, raw: Any) -> None:
                clusters = self.settings.handled_clusters()
                if clusters is None or envelope.cluster in clusters:
                    await self.apply(envelope, digest(raw.data))

            async def done() -> None:
                self.caught_up.add(name)
                self.wake.set()

            await self.bus.catch_up_then_follow(name, on_event, done, with_raw=True)
        follow.__name__ = f"follow_{name.replace('.', '_')}"
        return follow

    def cluster(self, name: str):
        return self.stage.cluster(name)

    @property
    def learner(self):
        return self.stage.learner

    @property
    def active(self) -> set[str]:
        return self.stage.active

    # -- events (every replica) -------------------------------------------------
    async def apply(self, envelope: Any, read_digest: str = "") -> None:
        self.scheduling.observe(envelope, counting="bind.result" in self.caught_up)
        if self.stage.read(envelope, self.clock(), read_digest):
            self.wake.set()

    async def on_leadership(self, gained: frozenset[int], lost: frozenset[int]) -> None:
        self.stage.elected(bool(gained), bool(lost), self.clock())
        if gained:
            await self._claim()
            # A claim may have to wait for the takeover to settle: have the loop
            # re-check at its claiming pace now, not at its idle one.
            self.wake.set()

    async def _claim(self) -> None:
        if "placement.decision" not in self.caught_up:
            return
        for cluster, fence in self.stage.claim(self.clock()):
            await self.bus.publish(fence, cluster=cluster)

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
        for taken in self.stage.decide(name, self.clock(), attempted=lambda code: attempts.labels(name, code).inc()):
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
            for _, key in self.stage.expire_binds(self.clock()):
                self.log.warning("no bind result for %s within %.0fs: rolling back", key, timeout)
                self.wake.set()

    async def watch_stale_nodes(self) -> None:
        while True:
            await asyncio.sleep(self.settings.node_stale_check_s)
            if self.stage.check_stale(self.clock()):
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
