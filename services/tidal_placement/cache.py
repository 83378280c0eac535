"""One cluster as placement knows it: the scheduler cache, the queue, tenants
and groups, bind tracking — and how each event changes them. Every replica
applies every event; only the leader runs the scheduling cycle over it.

No I/O and no clock of its own: times come in as arguments. A pod's holding
is derived from the latest event of each stream about it
(`holdings.PodRecord`; the node agent's `cpu.assignment` included, for the
per-NUMA CPUs of a moved pod), so the cache is the same whatever order the
streams are read in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from tidal_schemas import (
    STOP_SCHEDULING_TAINT, BindResult, CpuAssignment, NodeAction, NodeAllocatables, NodeScores, NodeStatus,
    NodeTopology, PlacementDecision, PodLifecycle, TenantConfig, UserScore, resource_type,
)
from tidal_runtime import packed_id
from tidal_schemas import filters
from tidal_schemas.fence import DecisionFence

from .booked_allocatable import BookedAllocatable
from .cluster_state import ClusterState
from .freshness import NodeFreshness
from .gpu_groups import GroupRegistry
from .kept import KeptDecision, KeptGpu, KeptPod
from .pod_records import PodRecords
from .queue import SchedulingQueue
from .tenant_ledger import TenantLedger

log = logging.getLogger("tidal.placement")


GONE_KEPT = 100_000  # deleted pods remembered against late decisions (a rebuild reads them in any order)
STOP_SCHEDULING = filters.STOP_SCHEDULING  # the block reason of a tainted node


class ClusterCache(NodeFreshness):
    """Everything placement keeps about one cluster (see the module docstring)."""

    def __init__(self, name: str, permit_timeout_s: float, stale_after_s: float,
                 on_pending: Callable[[KeptPod], None] = lambda p: None,
                 backoff_s: tuple[float, float] = (1.0, 10.0)):
        self.name = name
        self.stale_after_s = stale_after_s
        self.state = ClusterState()
        self.allocatable = BookedAllocatable(self.state)  # oversell's figures, the nodes' status: booked_allocatable.py
        self.queue = SchedulingQueue(permit_timeout_s, *backoff_s)
        self.groups = GroupRegistry()
        self.fence = DecisionFence()
        self.tenants: dict[str, TenantConfig] = {}
        self.inventory: dict[str, list[KeptGpu]] = {}  # node -> its GPUs
        self.gpu_model: dict[str, str] = {}  # GPU id -> model
        self.scores: dict[tuple[str, str], float] = {}  # (user, resource type) -> fair-share score
        self.records = PodRecords()  # pod key -> what is known of it
        self.gone: dict[int | str, None] = {}  # uids of deleted pods (`packed_id`), oldest first
        self.awaiting_bind: dict[str, float] = {}  # pod key -> when its decision was taken or read
        self.last_sample: dict[str, datetime] = {}  # node -> time of its newest sample
        self.stale: set[str] = set()  # nodes taken out for stale metrics
        self.room_changed = False  # waiting or refused pods may now fit
        self.on_pending = on_pending
        # Tenant usage, kept as holdings change once it is first asked for (most clusters
        # have no quota or group and never ask): stale until then, rebuilt when read.
        self.ledger, self._ledger_stale = TenantLedger(), True
        self.state.on_held = self._charge

    # -- events -------------------------------------------------------------------
    def apply(self, p: Any, now: float) -> bool:
        """Apply one event; True when the scheduling cycle should run again.
        Decisions go through `apply_decision` (they need the fence)."""
        # Like kube-scheduler's queueing hints: waiting pods are tried again on
        # what can make room, never on what only takes it. Oversell republishes
        # every node's allocatable each period; retrying every waiting pod on
        # each of those would cost a cycle per waiting pod per node per period.
        if isinstance(p, (NodeTopology, TenantConfig)) or (isinstance(p, NodeAction) and p.kind == "untaint"):
            self.room_changed = True
        if isinstance(p, NodeTopology):
            self.state.upsert_node(p)
            self.allocatable.topology(p.node)
            self.inventory[p.node] = [KeptGpu.of(gpu) for gpu in p.gpus]
            # a GPU's model is part of what its holders charge: rare, so they are all charged again
            self._ledger_stale |= any(self.gpu_model.get(gpu.id) != gpu.model for gpu in p.gpus)
            self.gpu_model.update((gpu.id, gpu.model) for gpu in p.gpus)
            self._regroup()
        elif isinstance(p, (NodeAllocatables, NodeStatus)):
            if not self.allocatable.apply(p):
                return False
            self.room_changed = True
        elif isinstance(p, NodeScores):
            woke = False
            for score in p.items:
                if score.older_than(self.last_sample.get(score.node)):
                    continue  # keep the newer loads
                self.state.apply_node_score(score)
                # loads re-rank, they do not make a waiting pod fit; a stale node speaking again may
                woke |= self.sampled(score.node, score.sampled_at, now)
            return woke
        elif isinstance(p, UserScore):
            self.scores[(p.user, p.resource_type)] = p.score
            return False
        elif isinstance(p, TenantConfig):
            self.tenants[p.tenant] = p
            self._regroup()
        elif isinstance(p, NodeAction) and p.kind in ("taint", "untaint") \
                and p.taint_key == STOP_SCHEDULING_TAINT and not p.dry_run:
            self.state.set_blocked(p.node, STOP_SCHEDULING, blocked=p.kind == "taint")
        elif isinstance(p, PodLifecycle):
            self._apply_pod(p, now)
        elif isinstance(p, BindResult):
            self._apply_bind(p, now)
        elif isinstance(p, CpuAssignment):
            return self._apply_assignment(p, now)
        else:
            return False
        return True

    def apply_decision(self, d: PlacementDecision, me: str, now: float) -> bool:
        """Apply a decision read from the log; whether the fence admitted it."""
        admitted = self.fence.admit(d)
        if d.outcome != "placed":
            return admitted
        key = self.records.key_of(d.event_key())
        record = self.records.get(key)
        if not admitted:
            live = record.live_decision() if record is not None else None
            if d.leader == me and live is not None and live.decision_id == d.decision_id:
                self.rollback(key, now)  # fenced out: undo our own assumption
        elif not (self.gone and packed_id(d.uid) in self.gone):
            record = self.records.edit(key)
            if record.decision is None or record.decision.decision_id != d.decision_id:  # not our own, kept
                record.decision = KeptDecision.of(d)
            self._reconcile(key, now)
        return admitted

    def _apply_pod(self, event: PodLifecycle, now: float) -> None:
        key = self.records.key_of(event.event_key())
        pod = KeptPod.of(event, key)
        if pod.phase == "deleted":
            self._bury(pod.packed_uid)
            if self._succeeded(key, pod.packed_uid):
                return  # the pod this name held before: its successor's record and room stay
            self.room_changed = True
            self.records.pop(key)
        else:
            self.records.set_pod(key, pod)
            if self.records.get(key).waits():
                self.on_pending(pod)
        self._reconcile(key, now)
        self._charge(key)  # its tenant or requests may have changed, its holding not

    def _succeeded(self, key: str, uid: int | str) -> bool:
        """Whether the pod kept under `key` is not the one of `uid`: made again under
        its name, the predecessor's deletion read late (without both uids: no)."""
        kept = self.records.pod(key)
        return uid != "" and kept is not None and kept.packed_uid != "" and kept.packed_uid != uid

    def _bury(self, uid: int | str) -> None:
        # Decisions are another stream: one for a pod deleted since may be read
        # after its deletion (a rebuild), and must not book anything then.
        if uid != "":  # a packed uid may be 0
            self.gone[uid] = None
            while len(self.gone) > GONE_KEPT:
                del self.gone[next(iter(self.gone))]

    def _apply_bind(self, result: BindResult, now: float) -> None:
        key = self.records.key_of(result.event_key())
        if result.ok:
            self.awaiting_bind.pop(key, None)
            self.state.confirm(key)
            return
        log.info("bind of %s on %s failed (%s): rolling back", key, result.node, result.reason)
        record = self.records.edit(key)
        record.failed |= {result.decision_id}  # also when read before its decision
        if result.bound_to and record.pod is not None and record.pod.phase == "pending":
            # The cluster has it bound: by an earlier decision whose bind outlived its
            # timeout, or by another scheduler. Placed again it would be refused again,
            # each time one more decision, bind and result, while the pod's own event
            # waits behind them: a retry storm under load.
            record.pod = record.pod.bound_to(result.bound_to)
        self.room_changed = True
        self._reconcile(key, now)

    def _apply_assignment(self, a: CpuAssignment, now: float) -> bool:
        # The node agent moved (or took back) a pod's exclusive CPUs: a bound
        # pod's per-NUMA holding follows it (holdings.bound_holding).
        if a.released and a.pod not in self.records:
            return False  # the pod is gone: nothing to correct
        key = self.records.key_of(a.pod)
        record = self.records.edit(key)
        before = record.holding()
        record.assignment = a
        if record.holding() != before:  # moved or taken back: the CPUs it left are free
            self.room_changed = True
        self._reconcile(key, now)
        return True

    def rollback(self, key: str, now: float) -> None:
        """Give up the pod's live decision (bind timed out, fenced out): its
        room returns to the cache and the pod to the queue."""
        record = self.records.get(key)
        decision = record.live_decision() if record is not None else None
        if decision is not None:
            self.records.edit(key).failed |= {decision.decision_id}
        self.room_changed = True
        self._reconcile(key, now)

    def _reconcile(self, key: str, now: float) -> None:
        """Make the cache and the queue say what the pod's record says."""
        record = self.records.get(key)
        if record is not None:
            record.settle()
            self.records.keep(key, record)
        holding = record.holding() if record is not None else None
        if holding is None:
            if self.state.release(key) is not None:
                self.room_changed = True
            self.awaiting_bind.pop(key, None)
        else:
            outcome = self.state.record(key, holding.allocation, holding.floating, confirmed=holding.bound)
            if outcome.reason:
                log.info("pod %s in %s: %s", key, self.name, outcome.reason)
            if holding.bound:
                self.awaiting_bind.pop(key, None)
            else:
                self.awaiting_bind.setdefault(key, now)
        if record is not None and record.waits():
            self.queue.add(record.pod, self.score(record.pod))
        else:
            self.queue.remove(key)

    def placed(self, decision: PlacementDecision, pod: KeptPod, now: float) -> None:
        """The leader took `decision` (already assumed in the state): the pod
        holds it from now on, whatever is read next."""
        key = pod.event_key()
        record = self.records.edit(key)
        record.decision, record.tries = KeptDecision.of(decision), record.tries + 1
        self.queue.remove(key)
        self.awaiting_bind[key] = now

    # -- reads -----------------------------------------------------------------
    def score(self, pod: KeptPod) -> float:
        return self.scores.get((pod.user, resource_type(pod)), 0.0)

    def holdings(self) -> Iterator[tuple[KeptPod, dict[str, int]]]:
        """(pod, GPUs held by name) of every Tidal pod holding room here."""
        for key, pod in self.records.pods():
            held = self.state.held(key) if not pod.foreign else None
            if held is not None:
                yield pod, dict(held.gpus)

    def tenant_usage(self) -> dict[str, dict[str, int]]:
        """`tenancy.tenant_usage` of `holdings()`, from the ledger (a copy)."""
        if self._ledger_stale:
            self.ledger.clear()
            self._ledger_stale = False
            for key in self.records:
                self._charge(key)
        return self.ledger.usage()

    def _charge(self, key: str) -> None:
        if self._ledger_stale:
            return  # rebuilt whole when next read
        held = self.state.held(key)
        pod = self.records.pod(key) if held is not None else None
        self.ledger.set(key, None if pod is None or pod.foreign else pod,
                        ((self.gpu_model.get(gpu, ""), milli) for gpu, milli in dict(held.gpus).items()) if held else ())

    def placed_here(self) -> list[KeptPod]:
        """Pods this replica has placed that are not bound yet, as last seen."""
        return [record.pod for record in self.records.records() if record.tries and record.pod is not None]

    def tries(self, key: str) -> int:
        """Placements this replica made for the pod (a rollback's retry gets a new decision id)."""
        record = self.records.get(key)
        return record.tries if record is not None else 0

    def governed(self) -> bool:
        """Whether any tenant has a quota or groups (else usage is not needed)."""
        return any(t.quota or t.groups or t.auto_grouping for t in self.tenants.values())

    def expired_binds(self, now: float, timeout_s: float) -> list[str]:
        return [key for key, since in self.awaiting_bind.items() if now - since >= timeout_s]

    def _regroup(self) -> None:
        for config in self.tenants.values():
            self.groups.apply(config, self.inventory)
