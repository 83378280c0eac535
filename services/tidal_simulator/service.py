"""The simulator service: the model of `model.py` on the bus.

Publishes what the bridge and the node agents would: `node.topology` of
every node at start, `node.metrics` per node each tick (when its sample can
have changed, or after `metrics_heartbeat_s`), `pod.lifecycle` (pending →
bound → running → deleted), `bind.result`, `cpu.assignment` and
`action.result`. Consumes `placement.decision` (binds placed pods; refuses a
seeded share `bind_failure_rate` of them to exercise rollback),
`node.allocatable` (admission uses it) and `node.action` (answers every
action). Events carry the simulated time. A driver (`driver.py`) releases
pods and waits for them to settle; `settled` futures tell it when a pod is
running or was decided pending.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from tidal_bus import Delivery, StartAt
from tidal_schemas import (
    ActionResult, Envelope, NodeAction, NodeAllocatable, NodeMetrics, Payload, PlacementDecision, PodLifecycle,
    make_envelope,
)

from tidal_runtime import Service, Subscription

from .clock import SimClock
from .frag_ledger import FragLedger
from .model import ClusterModel, Outcome
from .recorder import Recorder, TickSample
from .sampling import node_is_static, sample_node
from .settings import SimulatorSettings
from .workload import Workload


class SimulatorService(Service):
    name = "simulator"
    settings_class = SimulatorSettings
    produces = ("node.topology", "node.metrics", "pod.lifecycle", "bind.result", "action.result")

    def __init__(self, settings: SimulatorSettings | None = None, *, bus=None, workload: Workload | None = None,
                 run_id: str | None = None) -> None:
        super().__init__(settings, bus=bus)
        s: SimulatorSettings = self.settings  # type: ignore[assignment]
        if workload is None:
            from .sources import workload_from_settings

            workload = workload_from_settings(s)
        self.workload = workload
        self.model = ClusterModel(workload.nodes, workload.pods)
        self.clock = SimClock(s.start or datetime.now(timezone.utc).replace(microsecond=0),
                              s.tick_s or workload.tick_s, real_time=s.clock == "real-time")
        self.bind_rng = np.random.default_rng([s.seed, 1])
        self.usage_rng = np.random.default_rng([s.seed, 2])
        self.record = Recorder()
        self.ledger: FragLedger | None = None
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self.waiters: dict[str, asyncio.Future] = {}
        self.last_metrics: dict[str, NodeMetrics] = {}
        self._nodes = sorted(self.model.nodes)
        self._dirty: set[str] = set(self.model.nodes)
        self._static: dict[str, bool] = {}
        self._sampled_at: dict[str, float] = {}
        self._awaiting_allocatable: set[str] = set()
        self._last_input = time.monotonic()
        self.started_at = datetime.now(timezone.utc) - timedelta(seconds=1)

    # -- wiring -----------------------------------------------------------------
    def subscriptions(self) -> list[Subscription]:
        # A simulation starts from nothing: only what is decided from its start on
        # concerns it. From its start, not from "latest": an answer published
        # while its consumers are still joining (remediation reacts to the first
        # metrics) would otherwise be lost.
        group = f"simulator-{self.run_id}"
        common = dict(group=group, start=StartAt.at_time(self.started_at), replay_on_assign=False)
        return [Subscription("placement.decision", self.on_decision, **common),
                Subscription("node.allocatable", self.on_allocatable, **common),
                Subscription("node.action", self.on_action, **common)]

    def loops(self):
        return [self.drive] if self.settings.autorun else []

    async def drive(self) -> None:
        """Standalone: release the workload by its arrival times, then keep
        answering decisions and actions until stopped."""
        from .driver import run_timed

        for consumer in self.consumers:  # decisions go to a group that starts at the latest event
            await consumer.ready.wait()
        await run_timed(self, forever=self.clock.real_time)
        self.log.info("workload done at %.0f s of scenario time; still answering", self.clock.t_s)
        await asyncio.Event().wait()

    async def on_start(self) -> None:
        """The cluster as it is at time 0: inventories, tenants, pods already
        running, and a first usage sample of every node."""
        for node in self.model.nodes.values():
            await self.emit(node.topology)
        for tenant in self.workload.tenants:
            await self.emit(tenant)
        for spec in self.workload.pods:
            if spec.node is not None:
                outcome = self.model.place(spec.key, spec.node, self.clock.now(), 0.0)
                if not outcome.ok:
                    raise ValueError(f"cannot start pre-placed pod: {outcome.reason}")
                self.record.happen(0.0, "placed", spec.node, spec.key, "running at start")
                await self.emit_all(outcome.events)
        await self.publish_metrics(force=True)

    async def emit(self, payload: Payload, *, cause: Envelope[Any] | None = None,
                   discriminator: str = "") -> Envelope[Any]:
        """Publish with the simulated time on the envelope."""
        envelope = make_envelope(payload, cluster=cause.cluster if cause else self.settings.cluster,
                                 source=self.name, cause=cause, time=self.clock.now(), discriminator=discriminator)
        await self.bus.publish_envelope(envelope)
        self.metrics.published(payload.TYPE)
        return envelope

    async def emit_all(self, events, cause: Envelope[Any] | None = None) -> None:
        for event in events:
            tag = getattr(event, "phase", "") or ("released" if getattr(event, "released", False) else "")
            await self.emit(event, cause=cause, discriminator=f"{event.TYPE}/{tag}")

    # -- inputs -----------------------------------------------------------------
    async def on_decision(self, envelope: Envelope[PlacementDecision], delivery: Delivery) -> None:
        decision, t = envelope.payload, self.clock.t_s
        key = decision.event_key()
        pod = self.model.pods.get(key)
        if pod is None or (decision.uid and pod.request.uid and decision.uid != pod.request.uid):
            return  # not a pod of this simulation
        self._touch()
        record = self.record
        record.decisions += 1
        if key in record.released_at and key not in record.latencies_s:
            record.latencies_s[key] = time.monotonic() - record.released_at[key]
        record.last_decision[key] = (decision.outcome, decision.reason, dict(decision.filtered))
        if decision.outcome == "pending":
            record.happen(t, "pending", None, key, decision.reason)
            self._settle(key, "pending")
            return
        rate = self.settings.bind_failure_rate
        if rate and pod.phase == "pending" and self.bind_rng.random() < rate:
            reason = f"injected bind failure (rate {rate:g})"
            outcome = Outcome(False, reason, (self.model.refuse(decision, reason),))
        else:
            outcome = self.model.bind(decision, self.clock.now(), t)
        await self.emit_all(outcome.events, envelope)
        if not outcome.ok:
            record.bind_results["failed"] += 1
            record.happen(t, "bind-failed", decision.node, key, outcome.reason)
            return
        if outcome.reason:  # a redelivered decision: already bound
            return
        record.bind_results["ok"] += 1
        record.happen(t, "placed", decision.node, key)
        self._changed(decision.node)
        self._settle(key, "running")

    async def on_allocatable(self, envelope: Envelope[NodeAllocatable], delivery: Delivery) -> None:
        figures = envelope.payload
        if figures.node not in self.model.nodes:
            return
        self._touch()
        self._awaiting_allocatable.discard(envelope.causation_id or "")
        self.model.set_allocatable(figures.node, figures.allocatable)
        self.record.allocatable_events += 1
        self.record.allocatable[figures.node] = {"cpu_milli": figures.allocatable.cpu_milli,
                                                 "memory_mib": figures.allocatable.memory_mib,
                                                 "factor": figures.factor or 1.0}
        if self.ledger is not None:
            self.ledger.refresh(figures.node)

    async def on_action(self, envelope: Envelope[NodeAction], delivery: Delivery) -> None:
        action, t = envelope.payload, self.clock.t_s
        self._touch()
        by = action.requested_by or envelope.source
        self.record.actions[(by, action.kind)] += 1
        outcome = self.model.act(action, self.clock.now())
        await self.emit_all(outcome.events, envelope)
        result = outcome.events[0]
        assert isinstance(result, ActionResult)
        self.record.results[(action.kind, result.status)] += 1
        if result.status != "done":
            return
        self.record.happen(t, action.kind, action.node, action.pod, action.reason[:160], by)
        self._changed(action.node)
        if action.kind == "evict":
            self.record.happen(t, "deleted", action.node, action.pod, "evicted", by)

    # -- what the driver calls ---------------------------------------------------
    async def release(self, key: str) -> asyncio.Future:
        """The pod arrives (its pending event is published); the future
        resolves to "running" or "pending" once it is settled."""
        future = asyncio.get_running_loop().create_future()
        self.waiters[key] = future
        self.record.released_at[key] = time.monotonic()
        self._touch()
        await self.emit(self.model.arrive(key, self.clock.now()))
        return future

    async def tick(self) -> float:
        """Advance the clock; pods whose time is up leave; publish samples."""
        t = self.clock.advance()
        for event in self.model.finish_due(t, self.clock.now()):
            if isinstance(event, PodLifecycle):
                self.record.happen(t, "deleted", event.node, event.event_key(), "finished")
                self._changed(event.node)
            await self.emit(event, discriminator=f"{event.TYPE}/finished")
        await self.publish_metrics()
        return t

    async def publish_metrics(self, force: bool = False) -> int:
        """A sample of each node that may have changed; the count published."""
        t, now, count = self.clock.t_s, self.clock.now(), 0
        interval = self.clock.tick_s
        heartbeat = self.settings.metrics_heartbeat_s
        for node in self._dirty:  # whether a node's sample moves with time changes only with its pods
            self._static[node] = node_is_static(self.model, node)
        for node in self._nodes:
            due = (force or heartbeat is None or node in self._dirty or not self._static.get(node, True)
                   or t - self._sampled_at.get(node, -1e18) >= heartbeat)
            if not due:
                continue
            metrics = sample_node(self.model, node, t, now, interval, self.usage_rng)
            envelope = await self.emit(metrics)
            if self.settings.expect_allocatable:
                self._awaiting_allocatable.add(envelope.id)
            self.last_metrics[node], self._sampled_at[node] = metrics, t
            count += 1
        self._dirty.clear()
        return count

    def sample_tick(self) -> TickSample:
        """What the report keeps of this moment."""
        usage: dict[str, dict[str, float]] = {}
        cpu_requested = 0
        for pod in self.model.pods.values():
            if pod.phase != "running":
                continue
            held = usage.setdefault(pod.request.tenant, {})
            held["cpu"] = held.get("cpu", 0.0) + pod.request.requests.cpu_milli
            held["memory"] = held.get("memory", 0.0) + pod.request.requests.memory_mib
            for share in pod.gpus:  # by model, and all models together
                held[share.model or "gpu"] = held.get(share.model or "gpu", 0.0) + share.milli
                held["gpu"] = held.get("gpu", 0.0) + share.milli
            cpu_requested += pod.request.requests.cpu_milli
        loads = {n: dict(m.numa_load) for n, m in self.last_metrics.items() if m.numa_load}
        used = sum(m.cpu_used_milli for m in self.last_metrics.values())
        sample = TickSample(self.clock.t_s, loads, used, cpu_requested, usage)
        self.record.ticks.append(sample)
        return sample

    async def settled(self, timeout: float | None = None, quiet_s: float | None = None) -> bool:
        """Wait until nothing came in for `settle_quiet_s` (or `quiet_s`)
        and, when expected, oversell answered every sample; False at
        `settle_max_s` (or `timeout`)."""
        s = self.settings
        deadline = time.monotonic() + (timeout if timeout is not None else s.settle_max_s)
        quiet_s = s.settle_quiet_s if quiet_s is None else quiet_s
        while True:
            quiet = time.monotonic() - self._last_input >= quiet_s
            if quiet and not self._awaiting_allocatable:
                return True
            if time.monotonic() > deadline:
                self._awaiting_allocatable.clear()  # an unanswered sample is not waited for twice
                return False
            await asyncio.sleep(min(max(s.settle_quiet_s / 2, 0.005), 0.05))

    # -- internals --------------------------------------------------------------
    def _touch(self) -> None:
        self._last_input = time.monotonic()

    def _changed(self, node: str | None) -> None:
        if node in self.model.nodes:
            self._dirty.add(node)
            if self.ledger is not None:
                self.ledger.refresh(node)

    def _settle(self, key: str, how: str) -> None:
        future = self.waiters.pop(key, None)
        if future is not None and not future.done():
            future.set_result(how)
