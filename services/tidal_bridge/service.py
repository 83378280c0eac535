"""The bridge service: Kubernetes ⇄ the bus, for one cluster.

Publishes (in its own `settings.cluster`):
- `pod.lifecycle` for every change of a pod whose spec.schedulerName is
  ours, and of every pod of another scheduler once it is bound to a node
  (published `foreign`: placement, oversell and remediation count what it
  requests against its node). A bound Tidal pod's event carries what it
  holds, read back from the decision written on it; one whose decision
  cannot be read is accounted by its requests and gets a Warning Event
  `TidalDecisionUnreadable`. Event ids are derived from (cluster, uid, resourceVersion) — or
  (cluster, uid, "deleted") — so a relist, a reconnect or a second replica
  yields the same ids and the bus drops the repeats; a change that leaves the
  event unchanged (a status condition, our own annotations) is not published.
  A pod with malformed `tidal.dev/` keys is published with `invalid_reason`
  and gets a Warning Event `TidalInvalidAnnotation`.
- `node.status`: each node's status.allocatable CPU and memory, what the
  kubelet admits against and placement books against (docs/last-mile.md),
  when it changes (node_watch.py).
- `node.topology` with node-level figures only, when `publish_node_facts`
  is on. Off by default: the node agent publishes the full topology of the
  same node (NUMA nodes, CPUs, GPUs) under the same key, and consumers keep
  the latest per node, so these facts would replace its inventory. Turn it
  on only where no node agent runs.
- `bind.result` for each `placed` decision, `action.result` for each taint,
  untaint and evict action (freeze, thaw and set-cpuset are the node
  agent's). Binds run side by side as decisions are read (`binds_in_flight.py`),
  checking pods and nodes in the watches' caches (binder.py, node_watch.py);
  their `Scheduled` Events are queued and written behind them (event_recorder.py).
- `tenant.config` for every `Tenant` object created, changed or deleted;
  `tenant.usage` and `score.user` become the status of the `Tenant` and
  `FairShare` objects (tenants.py), when `watch_tenants` is on.

Writes on each pod Tidal cannot place (a `pending` decision) the
`PodScheduled=False` condition and a `FailedScheduling` event, as
kube-scheduler does (`pod_status.py`).

Consumes only its own cluster's events (the runtime filters by
`handled_clusters()`, which the settings pin to the own cluster; handlers
check again). Oversell's `node.allocatable` is not the bridge's to write:
the admission webhook puts it in the nodes' status (docs/last-mile.md).
Evictions run in their own, unordered consumer group so that one held back
by a PodDisruptionBudget (429, retried with growing delays, then reported
`refused`) does not hold back the others; taints stay ordered per node.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from tidal_bus import Delivery, RetryPolicy, StartAt, defer
from tidal_bus.tracing import processing
from tidal_clock import Clock, now_utc, wall_clock
from tidal_schemas.fence import DecisionFence
from tidal_runtime import Service, Subscription
from tidal_schemas import ActionResult, BindResult, Envelope, PlacementDecision, PodLifecycle, derived_id

from .actuator import Actuator, carry_out
from .binder import Binder
from .binds_in_flight import BindsInFlight
from .event_budget import EventBudget
from .event_recorder import EventRecorder
from .gpu_ask import asked_resource
from .kube import Kube
from .metrics import BridgeMetrics
from .node_watch import NodeWatch
from .objects import DECISION_UNREADABLE, INVALID_ANNOTATION, SCHEDULED
from .pod_status import PodStatusReporter, create_pod_event
from .pods import kept_pod, kubelet_admitted, payload_digest, read_kept_pod, read_pod
from .settings import BridgeSettings
from .tenants import TenantBridge
from .watch import Change, Reflector

EVICTIONS = "evictions"


class BridgeService(Service):
    name = "bridge"
    settings_class = BridgeSettings
    produces = ("pod.lifecycle", "bind.result", "action.result", "tenant.config", "node.status")
    settings: BridgeSettings

    def __init__(self, settings: BridgeSettings | None = None, *, bus=None, kube: Kube | None = None) -> None:
        super().__init__(settings, bus=bus)
        self.fence = DecisionFence()
        self.clock: Clock = wall_clock  # how old an action is, when pod events happened
        self.kube = kube
        self._owns_kube = kube is None
        self.pods: Reflector | None = None
        self.nodes = NodeWatch(self)
        self.tenants = TenantBridge(self) if self.settings.watch_tenants else None
        # uid -> (digest of the last pod.lifecycle payload, whether pending): kept for every pod of the
        # cluster, so not the payload itself (about 6 KB)
        self._published: dict[str, tuple[bytes, bool]] = {}
        self._reported: dict[str, set[str]] = {}  # uid -> problems already reported as Events
        self.bridge_metrics = BridgeMetrics(self.metrics.registry, self.settings.cluster, lambda: (
            self.pods, self.nodes.reflector, self.tenants.reflector if self.tenants is not None else None),
            lambda: getattr(self, "binds", None))

    # -- wiring -----------------------------------------------------------------
    @property
    def group(self) -> str:
        """The consumer group: one per cluster. Bridges of several clusters on
        one bus must not share a group, or each would be handed partitions
        holding the other's events and skip them as not its own."""
        return f"{self.name}-{self.settings.cluster}"

    @property
    def evictions_group(self) -> str:
        return f"{self.group}-{EVICTIONS}"

    def subscriptions(self) -> list[Subscription]:
        # Nothing to rebuild from history: only act on new events.
        tenants = [
            # Status only. tenant.usage keeps each tenant's last report: worth showing after a restart.
            # score.user is a long history: a new group starts at its end, scores come every period.
            Subscription("tenant.usage", self.tenants.on_usage, group=self.group),
            Subscription("score.user", self.tenants.on_score, group=self.group, start=StartAt.latest(),
                         replay_on_assign=False),
        ] if self.tenants is not None else []
        return [*tenants,
            # Replayed (without acting) so the decision fence is known after a restart.
            Subscription("placement.decision", self.on_decision, group=self.group, windowed=True),
            Subscription("node.action", self.on_action, group=self.group, replay_on_assign=False),
            Subscription("node.action", self.on_eviction, group=self.evictions_group, ordered=False,
                         replay_on_assign=False),
        ]

    def loops(self):
        loops = [self.pods.run, self.nodes.reflector.run, self.nodes.reconcile, self.pod_status.run, self.events.run]
        return loops + (self.tenants.loops() if self.tenants is not None else [])

    async def on_start(self) -> None:
        s = self.settings
        if self.kube is None:
            self.kube = await Kube.connect(s)
        self.kube.observer = self.bridge_metrics.api(self.kube.host)
        # Every pod: a field selector cannot say "ours, or bound" (selectors only AND).
        self.pods = Reflector.of(self.kube, "pods", self._on_pod, s, accept=self._counted, keep=kept_pod,
                                 read_kept=read_kept_pod)
        self.nodes.connect(self.kube, s)
        self.binder = Binder(self.kube, scheduler_name=s.scheduler_name, attempts=s.bind_attempts,
                             retry_s=s.bind_retry_s, pods=self.pods, nodes=self.nodes.reflector)
        self.binds = BindsInFlight(s.bind_concurrency, s.gpu_admission_wait_s, self.log)
        self.api_retry = RetryPolicy(s.api_attempts, s.api_retry_s, s.api_retry_max_s)
        self.actuator = Actuator(self.kube, conflict_attempts=s.conflict_attempts)
        self.pod_status = PodStatusReporter(self.kube, gpu_resource=s.gpu_resource,
                                            budget=EventBudget(s.event_burst, s.event_refill_s), clock=self.clock)
        self.events = EventRecorder(self.kube, budget=EventBudget(s.event_burst, s.event_refill_s), clock=self.clock,
                                    log=self.log)
        if self.tenants is not None:
            self.tenants.connect(self.kube, s)
        for consumer in self.consumers:
            consumer.retry = (RetryPolicy(s.evict_attempts, s.evict_retry_s, s.evict_retry_max_s)
                              if consumer.group == self.evictions_group
                              else self.api_retry)

    async def on_stop(self) -> None:
        if getattr(self, "events", None) is not None:
            await self.events.flush()  # the Events of the last binds
        if self._owns_kube and self.kube is not None:
            await self.kube.close()

    def ready(self) -> tuple[bool, str]:
        if self.pods is not None and not self.pods.synced.is_set():
            return False, "listing pods"
        return super().ready()

    # -- Kubernetes -> bus --------------------------------------------------------
    def _counted(self, pod: dict[str, Any]) -> bool:
        """Ours (to place and to count), or bound to a node (to count)."""
        spec = pod.get("spec") or {}
        return spec.get("schedulerName") == self.settings.scheduler_name or bool(spec.get("nodeName"))

    def event_id(self, uid: str, event_type: str, version: str) -> str:
        return derived_id(f"kube:{self.settings.cluster}:{uid}", event_type, version)

    async def _on_pod(self, change: Change) -> None:
        obj = change.object
        gone = change.type == "DELETED"
        pod, unread = read_pod(obj, deleted=gone, gpu_resource=self.settings.gpu_resource,
                               scheduler_name=self.settings.scheduler_name)
        if self.tenants is not None:
            self.tenants.saw_pod(pod)  # the owners of its user's FairShare
        if gone or kubelet_admitted(obj):
            self.binds.admitted(pod.event_key())
        # A finished pod was published as deleted already; its DELETED then adds nothing.
        digest = payload_digest(pod)
        if self._published.get(pod.uid, (b"",))[0] != digest:
            version = "deleted" if pod.phase == "deleted" else str(obj["metadata"].get("resourceVersion"))
            await self.publish(pod, event_id=self.event_id(pod.uid, PodLifecycle.TYPE, version))
        if gone:
            self._published.pop(pod.uid, None)
            self._reported.pop(pod.uid, None)
            self.pod_status.forget(pod.namespace, pod.name)
            return
        self._published[pod.uid] = (digest, pod.phase == "pending")
        if pod.phase == "deleted":
            return
        for reason, problem in ((INVALID_ANNOTATION, pod.invalid_reason), (DECISION_UNREADABLE, unread)):
            if problem and problem not in self._reported.get(pod.uid, ()):
                if reason == DECISION_UNREADABLE:
                    self.log.warning("pod %s: %s", pod.event_key(), problem)
                if await create_pod_event(self.kube, obj, reason, problem, log=self.log, clock=self.clock):
                    self._reported.setdefault(pod.uid, set()).add(problem)

    # -- bus -> Kubernetes --------------------------------------------------------
    def _ours(self, envelope: Envelope[Any], delivery: Delivery) -> bool:
        if delivery.replaying:
            return False
        if envelope.cluster != self.settings.cluster:  # never act on another cluster's API server
            self.log.error("ignoring %s %s of cluster %s", envelope.type, envelope.id, envelope.cluster)
            return False
        return True

    async def on_decision(self, envelope: Envelope[Any], delivery: Delivery) -> None:
        ours = self._ours(envelope, delivery)
        binds = []
        for decision in envelope.payload.items:  # admitted in log order, replayed or not: tidal_schemas.fence
            if not self.fence.admit(decision) or not ours:
                continue
            key = decision.event_key()
            if decision.outcome == "placed":
                gate = f"{decision.node}/{sum(s.milli for s in decision.gpus)}" if decision.gpus else None
                binds.append(self.binds.start(key, partial(self._bind, decision, envelope), gate))
            elif decision.outcome == "pending" and self.binds.busy(key):  # after the pod's bind, as it came after
                binds.append(self.binds.start(key, partial(self._explain, decision)))
            elif decision.outcome == "pending":
                await self._explain(decision)
        # The next events are read while these bind; this one is acknowledged once they are done.
        if not all([defer(bind) for bind in binds]):  # each deferred; without a window (none is) wait here
            await asyncio.gather(*binds)

    async def _bind(self, decision: PlacementDecision, envelope: Envelope[Any]) -> bool:
        """Bind, publish the result; whether the pod was bound by it."""
        with processing(self.name, self.group, envelope, decision):
            outcome = await self.binder.bind_retrying(decision, self.api_retry)
            self.bridge_metrics.bound(outcome.result)
            await self.publish(BindResult(decision_id=decision.decision_id, namespace=decision.namespace,
                                          name=decision.name, node=decision.node, ok=outcome.ok,
                                          reason=outcome.reason, bound_to=outcome.bound_to),
                               cause=envelope, discriminator=decision.decision_id)
            if outcome.ok:
                self.pod_status.bound(decision.namespace, decision.name)
            if outcome.ok and outcome.pod is not None and not outcome.reason:  # written behind the binds
                self.events.record(outcome.pod, SCHEDULED, f"Successfully assigned {decision.namespace}/"
                                   f"{decision.name} to {decision.node} (decision {decision.decision_id})")
            return outcome.ok and not kubelet_admitted(outcome.pod or {})

    async def _explain(self, decision: PlacementDecision) -> None:
        if self._still_pending(decision):
            pod = self.pods.get(decision.namespace, decision.name) if self.pods is not None else None
            self.pod_status.submit(decision, asked_resource(pod, self.settings.gpu_resource))

    def _still_pending(self, decision: PlacementDecision) -> bool:
        """Not known bound or gone: a pending decision read late must not mark
        a pod unschedulable after it was bound, nor its successor of the name."""
        if not decision.uid:
            return True
        known = self._published.get(decision.uid)
        if known is None:  # gone, once every pod has been listed
            return self.pods is None or not self.pods.synced.is_set()
        return known[1]

    async def on_action(self, envelope: Envelope[Any], delivery: Delivery) -> None:
        """Taints and untaints, in order per node."""
        action = envelope.payload
        if action.kind in ("taint", "untaint") and self._ours(envelope, delivery):
            run = self.actuator.taint if action.kind == "taint" else self.actuator.untaint
            await self._act(envelope, delivery, run, self.settings.api_attempts)

    async def on_eviction(self, envelope: Envelope[Any], delivery: Delivery) -> None:
        """Evictions, each retried on its own when a disruption budget refuses it."""
        action = envelope.payload
        if action.kind == "evict" and self._ours(envelope, delivery):
            await self._act(envelope, delivery, self.actuator.evict, self.settings.evict_attempts)

    async def _act(self, envelope: Envelope[Any], delivery: Delivery, run, limit: int) -> None:
        action, age = envelope.payload, (now_utc(self.clock) - envelope.time).total_seconds()
        outcome = await carry_out(run, action, age, self.settings.max_event_age_s, delivery.attempt, limit)
        await self.publish(ActionResult(action_id=action.action_id, node=action.node, kind=action.kind,
                                        pod=action.pod, status=outcome.status, reason=outcome.reason),
                           cause=envelope, delivery=delivery)
