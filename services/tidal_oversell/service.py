"""The oversell service (§D): the oversold allocatable of every node, the
stop-scheduling taint with hysteresis, and evictions in the §D order.

Per-node streams are consumed by the group (replicas split the nodes; one
process owns the same partitions of every stream). Decisions to act are
taken only on live metrics, never while replaying history, and are checked
against this service's own action log, so a restart repeats no eviction."""

from __future__ import annotations

import asyncio
from typing import Any

from tidal_bus import Delivery
from tidal_clock import Clock, wall_clock
from tidal_schemas import (
    ActionResult, Envelope, NodeAction, NodeAllocatables, NodeMetrics, NodeScores, NodeTopology, PodLifecycle,
    Resources, derived_id,
)

from tidal_policy.action_memory import SENT_AT
from tidal_policy.action_modes import dry_run_notice
from tidal_runtime import InventoryGate, OutputBatches, Service, Subscription
from tidal_runtime.action_log import follow_action_log
from tidal_runtime.journal import Journal

from .eviction import candidate_from, plan_evictions
from .node_state import ActionLog, NodeView, inventory
from .pods_by_node import HeldPod, PodsByNode
from .policies import OVERSELL_POLICIES
from .pool_metrics import OversellMetrics
from .settings import TAINT_KEY, OversellSettings
from .thresholds import evict_threshold, taint_decision
from .thresholds import utilisation as memory_utilisation


class OversellService(Service):
    name = "oversell"
    settings_class = OversellSettings
    produces = ("node.allocatable",)

    def __init__(self, settings: OversellSettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.settings: OversellSettings
        self.views: dict[tuple[str, str], NodeView] = {}
        self.pods = PodsByNode()
        self.log_of_actions = ActionLog()
        self.action_log_ready = asyncio.Event()  # no action before our own log is read back
        self.granted: dict[tuple[str, str], Resources] = {}  # (cluster, node) -> allocatable granted last
        self.pool_metrics = OversellMetrics(self.metrics.registry, self._granted_by_node)
        self.allocatables = OutputBatches(NodeAllocatables, self.publish, linger_s=self.settings.output_linger_s,
                                          flush_at=self.settings.output_window)
        self.inventories = InventoryGate(self.settings.topology_wait_s)
        self.journal = Journal()  # every step that changes what it knows, in order: what a replay re-runs
        self.clock: Clock = wall_clock  # the journal's; decisions take the sample's own time
        self.dry_run = self.settings.dry_run_kinds()  # published marked dry_run, carried out by nobody
        if notice := dry_run_notice(self.dry_run, self.settings.dry_run, "oversell.evict: enabled"):
            self.log.warning("%s", notice)

    def subscriptions(self) -> list[Subscription]:
        return [Subscription("node.topology", self.on_topology), Subscription("score.node", self.on_score),
                Subscription("node.metrics", self.on_metrics, windowed=True, lingering=True)]

    def loops(self):
        return [self.follow_pods, self.follow_action_log]

    def _view(self, cluster: str, node: str) -> NodeView:
        return self.views.setdefault((cluster, node), NodeView())

    async def on_topology(self, envelope: Envelope[NodeTopology], delivery: Delivery) -> None:
        self.journal.read(envelope, self.clock())
        self._view(envelope.cluster, envelope.payload.node).topology = inventory(envelope.payload)
        self.inventories.arrived((envelope.cluster, envelope.payload.node))

    async def on_score(self, envelope: Envelope[NodeScores], delivery: Delivery) -> None:
        self.journal.read(envelope, self.clock())
        for score in envelope.payload.items:
            view = self._view(envelope.cluster, score.node)
            if not score.older_than(view.peak_sampled_at):  # else keep the newer peak
                view.peak, view.peak_sampled_at = score.peak, score.sampled_at

    async def follow_pods(self) -> None:
        async def on_event(envelope: Envelope[Any]) -> None:
            self.apply_pod(envelope)

        async def done() -> None:
            return None

        # pending pods are on no node: the broker leaves them out (StreamSpec.side_lane)
        await self.bus.catch_up_then_follow("pod.lifecycle", on_event, done, linger_s=self.settings.input_linger_s,
                                            main_lane_only=True)

    def apply_pod(self, envelope: Envelope[Any]) -> None:
        pod = envelope.payload
        if isinstance(pod, PodLifecycle):
            self.journal.read(envelope, self.clock())
            self.pods.apply(envelope.cluster, pod)
            if pod.phase == "deleted":
                self.log_of_actions.pod_gone(envelope.cluster, pod)

    async def follow_action_log(self) -> None:
        await follow_action_log(self.bus, self.apply_log, self.action_log_ready.set)

    def apply_log(self, envelope: Envelope[Any]) -> None:
        payload = envelope.payload
        if isinstance(payload, NodeAction) and payload.requested_by == self.name:
            self.journal.read(envelope, self.clock())
            self.log_of_actions.record(envelope.cluster, payload, envelope.time)
        elif isinstance(payload, ActionResult):
            self.journal.read(envelope, self.clock())
            self.log_of_actions.result(envelope.cluster, payload)

    def _granted_by_node(self):
        for (cluster, node), granted in list(self.granted.items()):
            topology = self.views[(cluster, node)].topology
            yield cluster, topology.pool, granted, topology.allocatable

    def pods_on(self, cluster: str, node: str) -> list[HeldPod]:
        return self.pods.on(cluster, node)

    async def on_metrics(self, envelope: Envelope[NodeMetrics], delivery: Delivery) -> None:
        metrics, cluster = envelope.payload, envelope.cluster
        view = self._view(cluster, metrics.node)
        if view.topology is None:
            if delivery.replaying:  # state only, and the node's history holds its topology too
                return
            await self.inventories.admit((cluster, metrics.node), lambda: view.topology is not None,
                                         f"node {cluster}/{metrics.node}")
        self.journal.read(envelope, self.clock(), op="grant/replayed" if delivery.replaying else "grant")
        allocatable, pods = self.grant(envelope)
        if not self.replaying(delivery, NodeAllocatables.TYPE):
            await self.allocatables.add(allocatable, key=metrics.node, cause=envelope)
        if not delivery.replaying:
            await self.action_log_ready.wait()
            self.journal.read(envelope, self.clock(), op="act")
            await self.act(envelope, view.topology, pods)

    def grant(self, envelope: Envelope[NodeMetrics]):
        """The node's oversold allocatable from this sample, and the pods it counted."""
        metrics, cluster = envelope.payload, envelope.cluster
        view = self.views[(cluster, metrics.node)]
        pods = self.pods_on(cluster, metrics.node)
        allocatable = self._allocatable(view, pods, metrics).model_copy(update={"sample": envelope.id})
        view.factors = dict(allocatable.factors)
        self.granted[(cluster, metrics.node)] = allocatable.allocatable
        return allocatable, pods

    def _allocatable(self, view: NodeView, pods: list[HeldPod], metrics: NodeMetrics):
        policy = OVERSELL_POLICIES[self.settings.policy_for(view.topology.pool)]
        return policy(view, pods, metrics, self.settings)

    async def act(self, envelope: Envelope[NodeMetrics], topology: NodeTopology, pods: list[HeldPod]) -> None:
        metrics, cluster, s = envelope.payload, envelope.cluster, self.settings
        now, node, basis = metrics.sampled_at, metrics.node, float(topology.capacity.memory_mib)
        if basis <= 0:
            return
        utilisation = memory_utilisation(metrics.memory_used_mib, basis)
        measured = {"memory_used_mib": float(metrics.memory_used_mib), "memory_limit_mib": basis,
                    "utilisation": utilisation}
        tainted = self.log_of_actions.tainted.get((cluster, node), False)
        decision = taint_decision(utilisation, tainted, s.stop_threshold, s.hysteresis)
        if decision.action != "keep":
            await self._send(envelope, decision.action, None, decision.reason, measured, taint_key=TAINT_KEY)
        threshold = evict_threshold(basis, basis, s.evict_fraction)
        if utilisation < threshold.utilisation or self.log_of_actions.cooling_down(
                cluster, node, now, s.eviction_cooldown_s):
            return
        usage = {u.pod: u for u in metrics.pods}
        pending = [p for p in pods if self.log_of_actions.eviction_pending(cluster, p.event_key(), now,
                                                                           s.eviction_timeout_s)]
        freed = sum(usage[p.event_key()].memory_mib for p in pending if p.event_key() in usage)
        candidates = [candidate_from(p, usage.get(p.event_key())) for p in pods if p not in pending]
        plan = plan_evictions(candidates, metrics.memory_used_mib - freed, basis, threshold.utilisation,
                              s.max_evictions_per_round)
        for step in plan.steps:
            await self._send(envelope, "evict", step.pod.name,
                             f"{step.reason}; {threshold.reason}; round: {plan.reason}",
                             {**measured, "projected_utilisation": step.projected_utilisation})

    async def _send(self, cause: Envelope[NodeMetrics], kind: str, pod: str | None, reason: str,
                    measured: dict[str, float], **fields: Any) -> None:
        node = cause.payload.node
        # Derived from the metrics event: re-handling it yields the same action id.
        action_id = derived_id(cause.id, "node.action", node, f"{kind}/{pod or ''}")
        # the log says when it was sent, so the memory rebuilt from it equals the live one
        measured = {**measured, SENT_AT: cause.payload.sampled_at.timestamp()}
        action = NodeAction(action_id=action_id, node=node, kind=kind, pod=pod, reason=reason, measured=measured,
                            dry_run=kind in self.dry_run, requested_by=self.name, **fields)
        self.log_of_actions.record(cause.cluster, action, cause.payload.sampled_at)
        self.pool_metrics.action(cause.cluster, action.kind, action.dry_run)
        self.log.info("node %s: %s%s %s (%s)", action.node, "dry run: " if action.dry_run else "", action.kind,
                      action.pod or "", action.reason)
        await self.publish(action, cause=cause, discriminator=f"{action.kind}/{action.pod or ''}")
