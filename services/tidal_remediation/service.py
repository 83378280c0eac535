"""The remediation service (§E hotspots): decides freeze / move / thaw per
NUMA node from live metrics; the node agent acts and answers on
`action.result`. Its memory (who is frozen, who moved, what awaits an
answer) is rebuilt from its own actions and their results on start, before
it decides anything, so a restart never strands a frozen pod."""

from __future__ import annotations

import asyncio
from typing import Any

from tidal_bus import Delivery
from tidal_clock import Clock, now_utc, wall_clock
from tidal_policy.action_memory import plan_retries
from tidal_policy.action_modes import dry_run_notice
from tidal_schemas import ActionResult, CpuAssignment, Envelope, NodeAction, NodeMetrics, NodeTopology, derived_id

from tidal_runtime import InventoryGate, Service, Subscription
from tidal_runtime.action_log import follow_action_log
from tidal_runtime.journal import Journal
from tidal_runtime.metrics import node_actions_counter

from .events import actions_to_events
from .memory import RemediationMemory
from .plan import plan_round
from .settings import RemediationSettings
from .state import NodeLayout, layout_of, node_state_from, told_exclusive


# Remediation acts on NUMA CPU load alone (plan.py): freezes and moves off a
# hot NUMA node, thaws on a cold one.
ACTION_REASONS = {"freeze": "cpu-hotspot", "set-cpuset": "cpu-hotspot", "thaw": "cpu-cold"}


class RemediationService(Service):
    name = "remediation"
    settings_class = RemediationSettings
    produces = ()  # acts only on hotspots

    def __init__(self, settings: RemediationSettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.settings: RemediationSettings
        self.policy = self.settings.policy()
        if notice := dry_run_notice(self.policy.dry_run, self.settings.dry_run, "remediation.freeze: enabled"):
            self.log.warning("%s", notice)
        self.layouts: dict[tuple[str, str], NodeLayout] = {}  # not the topologies: see NodeLayout
        self.exclusive: dict[tuple[str, str], set[str]] = {}
        self.memory: dict[str, RemediationMemory] = {}  # per cluster
        self.memory_ready = asyncio.Event()
        self.assignments_read = False  # caught up with cpu.assignment
        self.actions = node_actions_counter(self.metrics.registry)
        self.inventories = InventoryGate(self.settings.topology_wait_s)
        self.clock: Clock = wall_clock  # when an unanswered action is due again
        self.journal = Journal()  # every step that changes what it knows, in order: what a replay re-runs

    def subscriptions(self) -> list[Subscription]:
        return [Subscription("node.topology", self.on_topology),
                Subscription("node.metrics", self.on_metrics, windowed=True, lingering=True)]

    def loops(self):
        return [self.follow_log, self.follow_assignments, self.retry_unanswered]

    def _memory(self, cluster: str) -> RemediationMemory:
        return self.memory.setdefault(cluster, RemediationMemory())

    def _handles(self, cluster: str) -> bool:
        clusters = self.settings.handled_clusters()
        return clusters is None or cluster in clusters

    async def on_topology(self, envelope: Envelope[NodeTopology], delivery: Delivery) -> None:
        self.journal.read(envelope, self.clock())
        self.layouts[(envelope.cluster, envelope.payload.node)] = layout_of(envelope.payload)
        self.inventories.arrived((envelope.cluster, envelope.payload.node))

    # -- the log: our actions and their results, then live ---------------------
    def _apply_log(self, envelope: Envelope[Any]) -> None:
        payload = envelope.payload
        if not self._handles(envelope.cluster):
            return
        if isinstance(payload, NodeAction) and payload.requested_by == self.name:
            self.journal.read(envelope, self.clock())
            self._memory(envelope.cluster).record_action(payload)
        elif isinstance(payload, ActionResult):
            self.journal.read(envelope, self.clock())
            line = self._memory(envelope.cluster).record_result(payload)
            if line and self.memory_ready.is_set():
                self.log.info("%s", line)

    async def follow_log(self) -> None:
        def rebuilt() -> None:
            self.memory_ready.set()
            self.log.info("memory rebuilt: %s", {c: len(m.frozen) for c, m in self.memory.items()})

        await follow_action_log(self.bus, self._apply_log, rebuilt)

    async def follow_assignments(self) -> None:
        async def on_event(envelope: Envelope[Any]) -> None:
            self.apply_assignment(envelope)

        async def done() -> None:
            self.assignments_read = True  # the journal's `decide` steps say it

        await self.bus.catch_up_then_follow("cpu.assignment", on_event, done)

    def apply_assignment(self, envelope: Envelope[Any]) -> None:
        a = envelope.payload
        if isinstance(a, CpuAssignment):
            self.journal.read(envelope, self.clock())
            pods = self.exclusive.setdefault((envelope.cluster, a.node), set())
            (pods.discard if a.released else pods.add)(a.pod)

    # -- deciding -------------------------------------------------------------
    async def on_metrics(self, envelope: Envelope[NodeMetrics], delivery: Delivery) -> None:
        if delivery.replaying:
            return  # decisions are taken on live samples only; the memory comes from the log
        metrics, cluster = envelope.payload, envelope.cluster
        key = (cluster, metrics.node)
        if key not in self.layouts:
            await self.inventories.admit(key, lambda: key in self.layouts, f"node {cluster}/{metrics.node}")
        await self.memory_ready.wait()
        self.journal.read(envelope, self.clock(), op="decide" if self.assignments_read else "decide/unassigned")
        await self.decide(envelope)

    async def decide(self, envelope: Envelope[NodeMetrics]) -> None:
        """One round for the sampled node: its actions, published."""
        metrics, cluster = envelope.payload, envelope.cluster
        layout = self.layouts[(cluster, metrics.node)]
        memory = self._memory(cluster)
        exclusive = told_exclusive(self.exclusive.get((cluster, metrics.node)), layout, self.assignments_read)
        state = node_state_from(metrics, layout, exclusive)
        plan = plan_round(state, memory, self.policy, metrics.sampled_at)
        for note in plan.notes:
            self.log.debug("node %s: %s", metrics.node, note)
        for action in actions_to_events(plan, metrics.node, requested_by=self.name):
            memory.record_action(action)
            self.actions.labels(cluster, action.kind, ACTION_REASONS.get(action.kind, "other"),
                                str(action.dry_run).lower()).inc()
            self.log.info("node %s: %s%s %s (%s)", action.node, "dry run: " if action.dry_run else "", action.kind,
                          action.pod, action.reason)
            await self.publish(action, event_id=action.action_id, cluster=cluster)

    async def retry_unanswered(self) -> None:
        await self.memory_ready.wait()
        while True:
            await asyncio.sleep(self.settings.retry_check_s)
            await self.retry(self.clock())

    async def retry(self, t: float) -> None:
        """Send again what is unanswered past its timeout; give up past the retries."""
        now = now_utc(lambda: t)
        for cluster, memory in list(self.memory.items()):
            self.journal.step(cluster, "retry", t)
            plan = plan_retries(memory.actions, now, self.policy.action_timeout_s, self.policy.max_retries)
            for action in plan.resend:
                memory.record_action(action)
                attempt = int(action.measured.get("attempt", 2))
                self.log.warning("action %s (%s %s) unanswered: sending again, attempt %d",
                                 action.action_id, action.kind, action.pod, attempt)
                await self.publish(action, cluster=cluster, event_id=derived_id(
                    action.action_id, "node.action", action.node, f"attempt-{attempt}"))
            for result in plan.give_up:
                self.log.error("giving up action %s: %s", result.action_id, result.reason)
                memory.record_result(result)
                await self.publish(result, cluster=cluster)
