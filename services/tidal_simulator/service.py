"""The simulator service: a stand-in cluster on the bus, behind a
Kubernetes API server.

It plays the world, never Tidal: the cluster's API server (`kube_api`,
with the kubeconfig written to `settings.kubeconfig`), where it creates the
nodes and, as they arrive, the pods users submit; the kubelets
(`kubelet.py`), which admit bound pods, run them and delete finished ones;
and the machines' node agents — `node.topology` of every node at start,
`node.metrics` per node each tick (when its sample can have changed, or
after `metrics_heartbeat_s`), `cpu.assignment` (`agents.py`) and the
results of freeze / thaw / set-cpuset. The bridge, connected to the API
server, is what publishes pod lifecycle events and bind results, and what
carries out taints and evictions.

It also watches the pipeline for the report: `placement.decision` (a pod
decided pending is settled), `bind.result`, `node.action` (who asked for
what) and `action.result`; and takes in `node.allocatable` (the kubelets
admit against the oversold allocatable). Events carry the simulated time. A
driver (`driver.py`) releases pods and waits for them to settle: `settled`
futures tell it when a pod is running or was decided pending.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from tidal_bus import Delivery, StartAt
from tidal_schemas import (
    ActionResult, BindResult, CpuAssignment, Envelope, NodeAction, NodeAllocatable, NodeMetrics, Payload,
    PlacementDecision, make_envelope,
)
from tidal_schemas.decision_codec import write_decision

from tidal_runtime import Service, Subscription

from .clock import SimClock
from .frag_ledger import FragLedger
from .kube_api import KubeApiServer, write_kubeconfig
from .kubelet import Kubelets
from .model import AGENT_ACTIONS, ClusterModel
from .pods import node_manifest, pod_manifest
from .recorder import Recorder, TickSample
from .sampling import node_is_static, sample_node
from .settings import SimulatorSettings
from .workload import Workload


class SimulatorService(Service):
    name = "simulator"
    settings_class = SimulatorSettings
    produces = ("node.topology", "node.metrics", "cpu.assignment", "action.result")

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
        self.api = KubeApiServer(history_limit=s.kube_history, record_requests=False)
        self.api.on_request = lambda method, path: self._touch()
        self.kubelets = Kubelets(self)
        self.api.admit_binding = self.kubelets.admit
        self.api.store.listeners.append(self.kubelets.observe)
        self._kubeconfig = ""
        self._asked: dict[tuple[str, str, str | None], str] = {}  # (kind, node, pod) -> who asked
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
                Subscription("bind.result", self.on_bind_result, **common),
                Subscription("node.allocatable", self.on_allocatable, **common),
                Subscription("node.action", self.on_action, **common),
                Subscription("action.result", self.on_action_result, **common)]

    def loops(self):
        return [self.kubelets.run, *([self.drive] if self.settings.autorun else [])]

    async def drive(self) -> None:
        """Standalone: release the workload by its arrival times, then keep
        answering decisions and actions until stopped."""
        from .driver import run_timed

        for consumer in self.consumers:  # decisions go to a group that starts at the latest event
            await consumer.ready.wait()
        await run_timed(self, forever=self.clock.real_time)
        self.log.info("workload done at %.0f s of scenario time; still answering", self.clock.t_s)
        await asyncio.Event().wait()

    @property
    def kubeconfig(self) -> str:
        """Where the kubeconfig of this cluster is (written at start)."""
        if not self._kubeconfig:
            self._kubeconfig = self.settings.kubeconfig or str(Path(tempfile.mkdtemp(prefix="tidal-sim-")) / "kubeconfig")
        return self._kubeconfig

    async def on_start(self) -> None:
        """The cluster as it is at time 0: its API server with every node and
        the pods already running, the machines' inventories, the tenants, and
        a first usage sample of every node."""
        s = self.settings
        await self.api.start(s.kube_api_host, s.kube_api_port)
        write_kubeconfig(self.kubeconfig, self.api.url, f"simulator-{s.cluster}")
        self.log.info("API server at %s (kubeconfig %s)", self.api.url, self.kubeconfig)
        for node in self.model.nodes.values():
            self.api.create_node(node_manifest(node.topology))
            await self.emit(node.topology)
        for tenant in self.workload.tenants:
            await self.emit(tenant)
        for spec in self.workload.pods:
            if spec.node is not None:
                await self._start_placed(spec)
        await self.publish_metrics(force=True)

    async def on_stop(self) -> None:
        await self.api.stop()

    async def _start_placed(self, spec) -> None:
        """A pod running since before the start: placed earlier, so its
        decision is written on it as the bridge wrote it then."""
        numa_cpus, gpus, problem = self.model.place(spec.key, spec.node, self.clock.now(), 0.0)
        if problem:
            raise ValueError(f"cannot start pre-placed pod: {problem}")
        pod = spec.pod
        earlier = PlacementDecision(decision_id=f"before-start-{pod.uid[:8]}", namespace=pod.namespace,
                                    name=pod.name, uid=pod.uid, outcome="placed", node=spec.node,
                                    numa_cpus=numa_cpus, gpus=list(gpus))
        self.api.create_pod(pod_manifest(pod, self.clock.now(), node=spec.node, phase="Running",
                                         annotations=write_decision(earlier)))
        self.record.happen(0.0, "placed", spec.node, spec.key, "running at start")
        self.kubelets.assigned(spec.key, spec.node, self.model.pods[spec.key].assigned)

    async def emit(self, payload: Payload, *, cause: Envelope[Any] | None = None,
                   discriminator: str = "") -> Envelope[Any]:
        """Publish with the simulated time on the envelope."""
        envelope = make_envelope(payload, cluster=cause.cluster if cause else self.settings.cluster,
                                 source=self.name, cause=cause, time=self.clock.now(), discriminator=discriminator)
        await self.bus.publish_envelope(envelope)
        self.metrics.published(payload.TYPE)
        return envelope

    # -- what the pipeline does ----------------------------------------------------
    async def on_decision(self, envelope: Envelope[PlacementDecision], delivery: Delivery) -> None:
        decision, t = envelope.payload, self.clock.t_s
        key = decision.event_key()
        pod = self.model.pods.get(key)
        if pod is None or (decision.uid and decision.uid != pod.request.uid):
            return  # not a pod of this simulation
        self._touch()
        record = self.record
        record.decisions += 1
        if key in record.released_at and key not in record.latencies_s:
            record.latencies_s[key] = time.monotonic() - record.released_at[key]
        record.last_decision[key] = (decision.outcome, decision.reason, dict(decision.filtered))
        if decision.outcome == "pending":
            record.happen(t, "pending", None, key, decision.reason)
            self.settle(key, "pending")

    async def on_bind_result(self, envelope: Envelope[BindResult], delivery: Delivery) -> None:
        result = envelope.payload
        if result.event_key() not in self.model.pods:
            return
        self._touch()
        self.record.bind_results["ok" if result.ok else "failed"] += 1
        if not result.ok:
            self.record.happen(self.clock.t_s, "bind-failed", result.node, result.event_key(), result.reason)

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
        """Every action is counted; the node agent's kinds are carried out here
        (the bridge carries out taints and evictions through the API server)."""
        action, t = envelope.payload, self.clock.t_s
        self._touch()
        by = action.requested_by or envelope.source
        self.record.actions[(by, action.kind)] += 1
        self._asked[(action.kind, action.node, action.pod)] = by
        if action.kind not in AGENT_ACTIONS or action.node not in self.model.nodes:
            return
        status, reason = self.model.act(action)
        await self.emit(ActionResult(action_id=action.action_id, node=action.node, kind=action.kind,
                                     pod=action.pod, status=status, reason=reason), cause=envelope)
        if status == "done":
            self.record.happen(t, action.kind, action.node, action.pod, action.reason[:160], by)
            self.changed(action.node)
            pod = self.model.pods.get(action.pod or "")
            if action.kind == "set-cpuset" and pod is not None and pod.assigned:  # as the agent announces a move
                await self.emit(CpuAssignment(node=action.node, pod=pod.key, cpuset=list(pod.assigned),
                                              numa_cpus=dict(pod.numa_cpus), decision_id=pod.decision_id or "",
                                              reason=reason[:1024]), cause=envelope)

    async def on_action_result(self, envelope: Envelope[ActionResult], delivery: Delivery) -> None:
        result = envelope.payload
        if result.node in self.model.nodes:
            self._touch()
            self.record.results[(result.kind, result.status)] += 1

    def asked_by(self, kind: str, node: str | None, pod: str | None) -> str:
        """Who asked for an action the bridge carried out, when known."""
        return self._asked.get((kind, node or "", pod), "")

    # -- what the driver calls ---------------------------------------------------
    async def release(self, key: str) -> asyncio.Future:
        """The pod is submitted to the API server; the future resolves to
        "running" or "pending" once it is settled."""
        future = asyncio.get_running_loop().create_future()
        self.waiters[key] = future
        self.record.released_at[key] = time.monotonic()
        self._touch()
        self.model.arrive(key, self.clock.now())
        self.api.create_pod(pod_manifest(self.model.pods[key].request, self.clock.now()))
        return future

    async def tick(self) -> float:
        """Advance the clock; pods whose time is up leave; publish samples."""
        t = self.clock.advance()
        self.kubelets.finish(self.model.due(t))
        await self.kubelets.idle.wait()
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
            if quiet and not self._awaiting_allocatable and self.kubelets.idle.is_set():
                return True
            if time.monotonic() > deadline:
                self._awaiting_allocatable.clear()  # an unanswered sample is not waited for twice
                return False
            await asyncio.sleep(min(max(s.settle_quiet_s / 2, 0.005), 0.05))

    # -- what the kubelets call ------------------------------------------------------
    def changed(self, node: str | None) -> None:
        """`node`'s pods changed: sample it, refresh its GPU figures."""
        if node in self.model.nodes:
            self._dirty.add(node)
            if self.ledger is not None:
                self.ledger.refresh(node)

    def settle(self, key: str, how: str) -> None:
        future = self.waiters.pop(key, None)
        if future is not None and not future.done():
            future.set_result(how)

    def _touch(self) -> None:
        self._last_input = time.monotonic()
