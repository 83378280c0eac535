"""The placement service: fair-share queue (§C), node/NUMA/GPU choice
(§A, §B, §E), scheduler cache with assume / confirm / forget.

Replicas run active/standby. Each keeps the whole cache warm from the
streams; the one that owns the single partition of `tenant.config` in the
leader group fences the decision log (see tidal_schemas.fence) and decides
once its fence reads back as valid. Every decision is assumed at once
(pre-allocation), confirmed by a good bind result, forgotten on a failed
bind or a bind timeout; pods are retried when something relevant changes."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Any

from tidal_bus import Delivery
from tidal_schemas import (
    STOP_SCHEDULING_TAINT, BindResult, CpuAssignment, Envelope, NodeAction, NodeAllocatable, NodeScore, NodeTopology, PlacementDecision,
    PodLifecycle, TenantConfig, UserScore, derived_id, resource_type,
)
from tidal_schemas.fence import DecisionFence, fence_decision
from tidal_schemas.placement import GpuShare

from tidal_runtime import Service, Subscription

from .cluster_state import ClusterState
from .decide import decide
from .holdings import PodRecord
from .pod_request import Placement, PodRequest, placement_decision
from .gpu_groups import GroupRegistry
from .gpu_strategies import make_strategy
from .gpu_workload import typical_workload
from .queue import SchedulingQueue
from .settings import PlacementSettings
from .staleness import stale_nodes, stale_reason
from .tenancy import allowance, charge, tenant_usage

FOLLOWED = ("node.topology", "node.allocatable", "score.node", "score.user", "tenant.config", "node.action",
            "pod.lifecycle", "bind.result", "placement.decision", "cpu.assignment")
TAINT_KEY = STOP_SCHEDULING_TAINT
GONE_KEPT = 100_000  # deleted pods remembered against late decisions (a rebuild reads them in any order)


def refresh_due(seen: int, every: int) -> bool:
    """Rebuild the typical workload after the 1st, 2nd, 4th, 8th… pod seen,
    then every `every` pods: a workload learnt from one pod and kept for the
    next `every` decisions cost fgd-cpu 1.2 points of GPU allocation on the
    openb trace (95.72 % with the whole trace's workload, 94.55 % learning it
    every 500 pods, 95.73 % with the doubling start)."""
    return (seen & (seen - 1) == 0 and seen < every) or seen % every == 1 or every == 1


class PlacementService(Service):
    name = "placement"
    settings_class = PlacementSettings
    produces = ("placement.decision",)

    def __init__(self, settings: PlacementSettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.settings: PlacementSettings
        self.state: dict[str, ClusterState] = {}
        self.queue: dict[str, SchedulingQueue] = {}
        self.groups: dict[str, GroupRegistry] = {}
        self.tenants: dict[tuple[str, str], TenantConfig] = {}
        self.gpu_model: dict[str, str] = {}
        self.inventory: dict[str, dict[str, list]] = {}  # cluster -> node -> GPUs
        self.scores: dict[tuple[str, str, str], float] = {}
        self.records: dict[tuple[str, str], PodRecord] = {}  # (cluster, pod key) -> what is known of it
        self.gone: dict[tuple[str, str], None] = {}  # (cluster, uid) of deleted pods, oldest first
        self.awaiting_bind: dict[tuple[str, str], float] = {}
        self.fences: dict[str, DecisionFence] = {}
        self.claimed: dict[str, int] = {}  # cluster -> epoch we claimed
        self.active: set[str] = set()  # clusters where our fence is the valid one
        self.wants_lead = False
        self.lead_since = 0.0
        self.last_claim: dict[str, float] = {}
        self.caught_up: set[str] = set()
        self.wake = asyncio.Event()
        self.room_changed: set[str] = set()  # clusters where waiting pods may now fit
        self.shapes: list = []
        self.strategy = make_strategy("best-fit")  # until enough pod shapes for the configured one
        self.decisions = 0
        self.requested: dict[tuple[str, str], PodLifecycle] = {}  # pods we placed, as they asked
        self.tries: dict[tuple[str, str], int] = {}  # placements made per pod (rollbacks give new ids)
        self.last_sample: dict[str, dict[str, datetime]] = {}  # cluster -> node -> time of its newest sample
        self.stale: dict[str, frozenset[str]] = {}  # cluster -> nodes taken out as stale
        self.clock = time.time  # "now" for staleness (injectable)

    # -- wiring ---------------------------------------------------------------
    def subscriptions(self) -> list[Subscription]:
        # The single partition of tenant.config elects the active replica.
        return [Subscription("tenant.config", self._ignore, group=f"{self.default_group()}-leader",
                             on_assign=self.on_leadership, replay_on_assign=False)]

    def loops(self):
        return [*[self._follower(name) for name in FOLLOWED], self.schedule_loop, self.bind_timeouts,
                self.watch_stale_nodes]

    async def _ignore(self, envelope: Envelope[Any], delivery: Delivery) -> None:
        return None

    def _follower(self, name: str):
        async def follow() -> None:
            async def on_event(envelope: Envelope[Any]) -> None:
                if self._handles(envelope.cluster):
                    await self.apply(envelope)

            async def done() -> None:
                self.caught_up.add(name)
                self.wake.set()

            await self.bus.catch_up_then_follow(name, on_event, done)
        follow.__name__ = f"follow_{name.replace('.', '_')}"
        return follow

    def _handles(self, cluster: str) -> bool:
        clusters = self.settings.handled_clusters()
        return clusters is None or cluster in clusters

    def _cluster(self, cluster: str) -> ClusterState:
        if cluster not in self.state:
            self.state[cluster] = ClusterState()
            self.queue[cluster] = SchedulingQueue(self.settings.permit_timeout_s)
            self.groups[cluster] = GroupRegistry()
        return self.state[cluster]

    # -- leadership -----------------------------------------------------------
    async def on_leadership(self, gained: frozenset[int], lost: frozenset[int]) -> None:
        if lost:
            self.wants_lead = False
            self.active.clear()
            self.log.info("placement: standing down")
        if gained:
            self.wants_lead = True
            self.lead_since = time.monotonic()
            self.log.info("placement: elected; fencing the decision log")
            await self._claim_all()
            # A claim may have to wait for the takeover to settle: have the loop
            # re-check at its claiming pace now, not at its idle one.
            self.wake.set()

    async def _claim_all(self) -> None:
        if not self.wants_lead or "placement.decision" not in self.caught_up:
            return
        now = time.monotonic()
        for cluster in sorted({*self.state, *(self.settings.handled_clusters() or ())}):
            fence = self.fences.get(cluster)
            # Right after an election two replicas may both think they lead; one
            # that lost a fence claims again only once that overlap has passed.
            settled = fence is None or not fence.leader or now - self.lead_since >= self.settings.takeover_settle_s
            if cluster not in self.active and cluster not in self.claimed and settled \
                    and now - self.last_claim.get(cluster, 0.0) >= self.settings.takeover_settle_s:
                self.last_claim[cluster] = now
                epoch = self.fences.get(cluster, DecisionFence()).epoch + 1
                self.claimed[cluster] = epoch
                await self.bus.publish(fence_decision(epoch, self.bus.backend.member_id), cluster=cluster)

    # -- applying events (every replica) --------------------------------------
    async def apply(self, envelope: Envelope[Any]) -> None:
        cluster, p = envelope.cluster, envelope.payload
        state = self._cluster(cluster)
        if isinstance(p, (NodeTopology, NodeAllocatable, TenantConfig)) or (
                isinstance(p, NodeAction) and p.kind == "untaint"):
            self.room_changed.add(cluster)
        if isinstance(p, NodeTopology):
            state.upsert_node(p)
            self.inventory.setdefault(cluster, {})[p.node] = list(p.gpus)
            for gpu in p.gpus:
                self.gpu_model[gpu.id] = gpu.model
            self._regroup(cluster)
        elif isinstance(p, NodeAllocatable):
            state.set_allocatable(p.node, p.allocatable)
        elif isinstance(p, NodeScore):
            state.apply_node_score(p)
            self._sampled(cluster, p.node, p.sampled_at)
            return  # loads re-rank, they do not make a waiting pod fit
        elif isinstance(p, UserScore):
            self.scores[(cluster, p.user, p.resource_type)] = p.score
            return
        elif isinstance(p, TenantConfig):
            self.tenants[(cluster, p.tenant)] = p
            self._regroup(cluster)
        elif isinstance(p, NodeAction) and p.kind in ("taint", "untaint") and p.taint_key == TAINT_KEY \
                and not p.dry_run:
            state.set_blocked(p.node, "stop-scheduling taint", blocked=p.kind == "taint")
        elif isinstance(p, PodLifecycle):
            self._apply_pod(cluster, p)
        elif isinstance(p, BindResult):
            self._apply_bind(cluster, p)
        elif isinstance(p, CpuAssignment):  # the node agent moved or took back a pod's CPUs
            if p.released and (cluster, p.pod) not in self.records:
                return
            self._record(cluster, p.pod).assignment = p
            self.room_changed.add(cluster)
            self._reconcile(cluster, p.pod)
        elif isinstance(p, PlacementDecision):
            await self._apply_decision(cluster, p)
            return
        else:
            return
        self.wake.set()

    def _sampled(self, cluster: str, node: str, at: datetime) -> None:
        seen = self.last_sample.setdefault(cluster, {})
        if node not in seen or at > seen[node]:
            seen[node] = at
        if node in self.stale.get(cluster, ()):  # it speaks again: back at once
            self.check_stale(cluster)

    def check_stale(self, cluster: str) -> None:
        """Take out the nodes of `cluster` gone stale and put back those no
        longer stale (the rule is `staleness.stale_nodes`)."""
        after = self.settings.node_stale_after_s
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        stale = stale_nodes(self.last_sample.get(cluster, {}), now, after)
        before, state, reason = self.stale.get(cluster, frozenset()), self._cluster(cluster), stale_reason(after)
        for node in stale:  # again each time: a node may have been unknown to the cache before
            state.set_blocked(node, reason)
        for node in sorted(stale - before):
            self.log.warning("node %s/%s: %s; it takes no new pods until it sends one", cluster, node, reason)
        for node in sorted(before - stale):
            state.set_blocked(node, reason, blocked=False)
            self.log.info("node %s/%s: sampled again; it takes new pods", cluster, node)
        if before - stale:
            self.room_changed.add(cluster)
            self.wake.set()
        self.stale[cluster] = stale

    async def watch_stale_nodes(self) -> None:
        while True:
            await asyncio.sleep(self.settings.node_stale_check_s)
            for cluster in sorted(self.state):
                self.check_stale(cluster)

    def _regroup(self, cluster: str) -> None:
        inventory = self.inventory.setdefault(cluster, {})
        for (c, tenant), config in self.tenants.items():
            if c == cluster:
                self.groups[cluster].apply(config, inventory)

    def _record(self, cluster: str, key: str) -> PodRecord:
        return self.records.setdefault((cluster, key), PodRecord())

    def _apply_pod(self, cluster: str, pod: PodLifecycle) -> None:
        key = pod.event_key()
        if pod.phase == "deleted":
            self.room_changed.add(cluster)
            self.records.pop((cluster, key), None)
            self.requested.pop((cluster, key), None)
            self._bury(cluster, pod.uid)
            self._reconcile(cluster, key)
            return
        record = self._record(cluster, key)
        record.pod = pod
        if record.waits():
            self.shapes.append(PodRequest.from_pod(pod).shape)
            if refresh_due(len(self.shapes), self.settings.workload_refresh):
                self._refresh_strategy()
        self._reconcile(cluster, key)

    def _bury(self, cluster: str, uid: str) -> None:
        # Decisions are another stream: one for a pod deleted since may be read
        # after its deletion (a rebuild), and must not book anything then.
        if uid:
            self.gone[(cluster, uid)] = None
            while len(self.gone) > GONE_KEPT:
                del self.gone[next(iter(self.gone))]

    def _reconcile(self, cluster: str, key: str) -> None:
        """Make the cache and the queue say what the pod's record says
        (`holdings.PodRecord`): the same whatever order the streams came in."""
        record = self.records.get((cluster, key))
        state, queue = self.state[cluster], self.queue[cluster]
        holding = record.holding() if record is not None else None
        if holding is None:
            if state.release(key) is not None:
                self.room_changed.add(cluster)
            self.awaiting_bind.pop((cluster, key), None)
        else:
            outcome = state.record(key, holding.allocation, holding.floating, confirmed=holding.bound)
            if outcome.reason:
                self.log.info("pod %s in %s: %s", key, cluster, outcome.reason)
            if holding.bound:
                self.awaiting_bind.pop((cluster, key), None)
            else:
                self.awaiting_bind.setdefault((cluster, key), time.monotonic())
        if record is not None and record.waits():
            queue.add(record.pod, self._score(cluster, record.pod))
        else:
            queue.remove(key)

    def _apply_bind(self, cluster: str, result: BindResult) -> None:
        key = f"{result.namespace}/{result.name}"
        if result.ok:
            self.awaiting_bind.pop((cluster, key), None)
            self.state[cluster].confirm(key)
            return
        self.log.info("bind of %s on %s failed (%s): rolling back", key, result.node, result.reason)
        self._record(cluster, key).failed.add(result.decision_id)  # also when read before its decision
        self.room_changed.add(cluster)
        self._reconcile(cluster, key)

    def _rollback(self, cluster: str, key: str) -> None:
        """Give up the pod's live decision (bind timed out, fenced out): its
        room returns to the cache and the pod to the queue."""
        record = self.records.get((cluster, key))
        decision = record.live_decision() if record is not None else None
        if decision is not None:
            record.failed.add(decision.decision_id)
        self.room_changed.add(cluster)
        self._reconcile(cluster, key)

    async def _apply_decision(self, cluster: str, d: PlacementDecision) -> None:
        fence = self.fences.setdefault(cluster, DecisionFence())
        admitted = fence.admit(d)
        me = self.bus.backend.member_id
        if d.outcome == "fence":
            if admitted and d.leader == me and self.wants_lead:
                self.active.add(cluster)
                self.log.info("placement: leading cluster %s at epoch %d", cluster, d.epoch)
            elif admitted:
                self.active.discard(cluster)
                self.claimed.pop(cluster, None)
            self.wake.set()
            return
        if d.outcome != "placed":
            return
        key = d.event_key()
        self._cluster(cluster)
        record = self.records.get((cluster, key))
        if not admitted:
            if d.leader == me and record is not None and record.live_decision() == d:
                self._rollback(cluster, key)  # fenced out: undo our own assumption
            return
        if (cluster, d.uid) in self.gone:
            return
        self._record(cluster, key).decision = d
        self._reconcile(cluster, key)

    def held_back(self, cluster: str, key: str) -> bool:
        """Whether the queued pod `key` is held back behind a waiting pod of
        its type: no decision is published for it until that pod goes or its
        permit expires (tools that wait for decisions need to know)."""
        queue = self.queue.get(cluster)
        return queue is not None and queue.held_back(key)

    def _score(self, cluster: str, pod: PodLifecycle) -> float:
        return self.scores.get((cluster, pod.user, resource_type(pod)), 0.0)

    def _refresh_strategy(self) -> None:
        try:
            self.strategy = make_strategy(self.settings.gpu_strategy, typical_workload(self.shapes[-5000:]))
        except ValueError as exc:
            self.log.warning("GPU strategy %s unavailable (%s); using best-fit", self.settings.gpu_strategy, exc)

    # -- deciding (the active replica) ----------------------------------------
    async def schedule_loop(self) -> None:
        while True:
            claiming = self.wants_lead and not self.active  # re-check soon: a claim may be due
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=0.25 if claiming else self.settings.permit_timeout_s / 2)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
            if len(self.caught_up) < len(FOLLOWED):
                continue
            if self.wants_lead:
                await self._claim_all()
            for cluster in sorted(self.active):
                await self.schedule_cluster(cluster)

    async def schedule_cluster(self, cluster: str) -> None:
        state, queue = self.state[cluster], self.queue[cluster]
        now = time.monotonic()
        queue.expire_waits(now)
        # Waiting and refused pods are tried again only when room, holdings or a
        # tenant's configuration may have changed (or a permit expired above); a
        # new pending pod alone changes none of these.
        retry_waiting = cluster in self.room_changed
        self.room_changed.discard(cluster)
        queue.rescore({e.key: self._score(cluster, e.pod) for e in queue.entries.values()})
        # Tenant usage is needed only for quotas and groups; most clusters have neither.
        governed = any(c == cluster and (t.quota or t.groups or t.auto_grouping) for (c, _), t in self.tenants.items())
        usage = tenant_usage(self._holdings(cluster), self.gpu_model) if governed else {}
        for position, (entry, held_back) in enumerate(queue.cycle()):
            if cluster not in self.active:
                return
            if held_back is not None:
                entry.reason = held_back
                continue
            if (entry.waiting_since is not None or entry.refused) and not retry_waiting:
                continue
            pod = entry.pod
            placement = self._place(cluster, state, pod, usage)
            fence = self.fences[cluster]
            tries = self.tries.get((cluster, entry.key), 0)
            decision_id = derived_id(f"placement/{fence.epoch}/{fence.leader}", PlacementDecision.TYPE,
                                     entry.key, f"{tries}/{entry.attempts}")
            decision = placement_decision(pod, placement, decision_id)
            extra = dict(epoch=fence.epoch, leader=fence.leader, queue_position=position,
                         fair_share_score=entry.score)
            if placement.ok:
                outcome = state.assume(entry.key, placement.allocation)
                if not outcome.ok:
                    self.log.error("assume of %s failed: %s", entry.key, outcome.reason)
                    continue
                extra["gpus"] = [GpuShare(gpu=g.gpu, milli=g.milli, model=self.gpu_model.get(g.gpu, ""))
                                 for g in decision.gpus]
                queue.remove(entry.key)
                self.tries[(cluster, entry.key)] = tries + 1
                self._remember_request(cluster, pod)
                self.awaiting_bind[(cluster, entry.key)] = now
                charge(usage.setdefault(pod.tenant, {}), pod, ((g.model, g.milli) for g in extra["gpus"]))
                self.decisions += 1
            else:
                changed = placement.reason != entry.reason
                if placement.refused:  # a rule, not room: no wait, no pod held back behind it
                    queue.refuse(entry.key, placement.reason, dict(placement.filtered))
                else:
                    queue.wait(entry.key, placement.reason, dict(placement.filtered), now)
                if not changed:
                    continue  # the same reasons: say it once, not every cycle
            decision = decision.model_copy(update=extra)
            if placement.ok:  # held by this decision from now on, whatever is read next
                self._record(cluster, entry.key).decision = decision
            await self.publish(decision, cluster=cluster)

    def requested_names(self) -> list[PodLifecycle]:
        """Pods this replica has placed (and not seen deleted)."""
        return list(self.requested.values())

    def _remember_request(self, cluster: str, pod: PodLifecycle) -> None:
        self.requested[(cluster, pod.event_key())] = pod

    def _holdings(self, cluster: str):
        """(pod, GPUs held by name) of every Tidal pod holding room in `cluster`."""
        state = self.state[cluster]
        for (c, key), record in self.records.items():
            held = state.held(key) if c == cluster and record.pod is not None and not record.pod.foreign else None
            if held is not None:
                yield record.pod, dict(held.gpus)

    def _place(self, cluster: str, state: ClusterState, pod: PodLifecycle, usage):
        if pod.invalid_reason:
            return Placement(False, reason=f"invalid pod: {pod.invalid_reason}", refused=True)
        config = self.tenants.get((cluster, pod.tenant))
        allowed = allowance(state, pod, config, self.groups[cluster].get(pod.tenant), usage.get(pod.tenant, {}))
        if allowed.reason:
            return Placement(False, reason=allowed.reason, refused=allowed.refused)
        return decide(state, PodRequest.from_pod(pod), self.strategy, allowed=allowed.gpus, nodes=allowed.nodes)

    async def bind_timeouts(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.settings.bind_timeout_s / 4))
            now = time.monotonic()
            for (cluster, key), since in list(self.awaiting_bind.items()):
                if now - since >= self.settings.bind_timeout_s:
                    self.log.warning("no bind result for %s within %.0fs: rolling back", key,
                                     self.settings.bind_timeout_s)
                    del self.awaiting_bind[(cluster, key)]
                    self._rollback(cluster, key)
                    self.wake.set()
