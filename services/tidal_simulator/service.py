"""The simulator service: a stand-in cluster on the bus, behind a
Kubernetes API server.

It plays the world, never Tidal: the cluster's API server (`kube_api`,
with the kubeconfig written to `settings.kubeconfig_path()`), where it creates the
nodes and, as they arrive, the pods users submit; the kubelets
(`kubelet.py`), which admit bound pods as the kubelet does (the node
object's allocatable, devices from the agent's device plugin over gRPC),
run them, delete finished ones and write their nodes' status through the
API server; and the machines — `node.topology` of every node at start,
`node.metrics` per node each tick (when its sample can have changed, or after
`metrics_heartbeat_s`), and their pod cgroups in memory. On every machine
runs the node agent's own code (`agents.py`): it reads pod lifecycle
events, decisions, bind results and actions, keeps its CPU books, writes
the cgroup tree and publishes `cpu.assignment` and the results of freeze /
thaw / set-cpuset. The bridge, connected to the API server, is what
publishes pod lifecycle events and bind results, and what carries out
taints and evictions.

It also watches the pipeline for the report: `placement.decision` (a pod
decided pending is settled), `bind.result`, `node.action` (who asked for
what) and `action.result`; with `expect_allocatable`, `node.allocatable`
only to know oversell answered every sample (pacing: what the cluster
admits comes from its node objects). Events carry the simulated time. A
driver (`driver.py`) releases pods and waits for them to settle: `settled`
futures tell it when a pod is running or was decided pending.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from tidal_bus import Delivery, StartAt
from tidal_clock import elapsed, now_utc
from tidal_schemas import (
    ActionResult, BindResult, Envelope, NodeAction, NodeAllocatables, NodeMetrics, Payload,
    PlacementDecisions, PodLifecycle, make_envelope,
)
from tidal_schemas import crd

from tidal_runtime import Service, Subscription

from .agents import NodeAgents
from .before_start import caught_up, read_fences, start_placed
from .clock import SimClock
from .frag_ledger import FragLedger
from .kube_api import KubeApiServer, write_kubeconfig
from .kubelet import Kubelets
from .model import ClusterModel
from .pods import node_manifest, pod_manifest
from .recorder import Recorder, TickSample, tick_sample
from .sampling import SampleSchedule, sample_node
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
        self.agents = NodeAgents((n.topology for n in workload.nodes), self.model.cgroups,
                                 lambda payload, cause=None, delivery=None, discriminator="":
                                 self.emit(payload, cause=cause, discriminator=discriminator),
                                 sample_clock=lambda: self.clock.now().timestamp())  # the samples' scenario time
        self.clock = SimClock(s.start or now_utc().replace(microsecond=0),
                              s.tick_s or workload.tick_s, real_time=s.clock == "real-time")
        self.bind_rng = np.random.default_rng([s.seed, 1])
        self.usage_rng = np.random.default_rng([s.seed, 2])
        self.record = Recorder()
        self.ledger: FragLedger | None = None
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self.waiters: dict[str, asyncio.Future] = {}
        self.last_metrics: dict[str, NodeMetrics] = {}
        self.api = KubeApiServer(history_limit=s.kube_history, record_requests=False)
        for definition in crd.documents().values():  # installed, as k8s/base installs them: `kubectl apply` a Tenant
            self.api.custom.register(definition)
        self.api.on_request = lambda method, path: self._touch()
        self.kubelets = Kubelets(self, s.node_status_s, s.node_status_report_s)
        self.api.admit_binding = self.kubelets.bind_fault
        self.api.store.listeners.append(self.kubelets.observe)
        self.kubeconfig = s.kubeconfig_path()
        self.schedule = SampleSchedule(list(self.model.nodes), self.settings.metrics_heartbeat_s)
        self._awaiting_allocatable: set[str] = set()
        self._last_input = elapsed()
        self.started_at = now_utc() - timedelta(seconds=1)

    # -- wiring -----------------------------------------------------------------
    def subscriptions(self) -> list[Subscription]:
        # A simulation starts from nothing: only what is decided from its start on
        # concerns it. From its start, not from "latest": an answer published
        # while its consumers are still joining (remediation reacts to the first
        # metrics) would otherwise be lost.
        group = f"simulator-{self.run_id}"
        common = dict(group=group, start=StartAt.at_time(self.started_at), replay_on_assign=False)
        pacing = [Subscription("node.allocatable", self.on_allocatable, **common)] * self.settings.expect_allocatable
        return [Subscription("placement.decision", self.on_decision, **common),
                Subscription("pod.lifecycle", self.on_pod, **common),
                Subscription("bind.result", self.on_bind_result, **common),
                *pacing,
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
        await self.kubelets.start()
        await self.caught_up()
        await run_timed(self, forever=self.clock.real_time)
        self.log.info("workload done at %.0f s of scenario time; still answering", self.clock.t_s)
        await asyncio.Event().wait()

    async def on_start(self) -> None:
        """The cluster as it is at time 0: its API server with every node and
        the pods already running, the machines' inventories, the tenants, and
        a first usage sample of every node."""
        s = self.settings
        await read_fences(self)
        await self.api.start(s.kube_api_host, s.kube_api_port)
        for node in self.model.nodes.values():
            self.api.create_node(node_manifest(node.topology))
        # the kubeconfig says the cluster is there: written once it has its nodes
        write_kubeconfig(self.kubeconfig, self.api.url, f"simulator-{s.cluster}")
        self.log.info("API server at %s (kubeconfig %s)", self.api.url, self.kubeconfig)
        for node in self.model.nodes.values():
            await self.emit(node.topology)
        for tenant in self.workload.tenants:
            await self.emit(tenant)
        for spec in self.workload.pods:
            if spec.node is not None:
                await start_placed(self, spec)
        await self.publish_metrics(force=True)

    async def caught_up(self, timeout_s: float = 60.0) -> bool:
        """Whether the node agents read of the pods running since the start (`before_start.caught_up`)."""
        return await caught_up(self, timeout_s)

    async def on_stop(self) -> None:
        await self.kubelets.stop()
        await self.api.stop()

    async def emit(self, payload: Payload, *, cause: Envelope[Any] | None = None,
                   discriminator: str = "") -> Envelope[Any]:
        """Publish with the simulated time on the envelope."""
        envelope = make_envelope(payload, cluster=cause.cluster if cause else self.settings.cluster,
                                 source=self.name, cause=cause, time=self.clock.now(), discriminator=discriminator)
        await self.bus.publish_envelope(envelope)
        self.metrics.published(payload.TYPE)
        return envelope

    # -- what the pipeline does ----------------------------------------------------
    async def on_pod(self, envelope: Envelope[PodLifecycle], delivery: Delivery) -> None:
        if envelope.cluster == self.settings.cluster:
            self._touch()
            await self.agents.on_pod(envelope.payload, cause=envelope)

    async def on_decision(self, envelope: Envelope[PlacementDecisions], delivery: Delivery) -> None:
        for decision in envelope.payload.items:
            if envelope.cluster == self.settings.cluster:
                await self.agents.on_decision(decision, cause=envelope)
            key = decision.event_key()
            pod = self.model.pods.get(key)
            if pod is None or (decision.uid and decision.uid != pod.request.uid):
                continue  # not a pod of this simulation
            self._touch()
            self.record.decision(self.clock.t_s, key, decision, elapsed())
            if decision.outcome == "pending":
                self.settle(key, "pending")

    async def on_bind_result(self, envelope: Envelope[BindResult], delivery: Delivery) -> None:
        result = envelope.payload
        if envelope.cluster == self.settings.cluster:
            await self.agents.on_bind_result(result, cause=envelope)
        if result.event_key() not in self.model.pods:
            return
        self._touch()
        self.record.bind_result(self.clock.t_s, result)

    async def on_allocatable(self, envelope: Envelope[NodeAllocatables], delivery: Delivery) -> None:
        """Pacing only (the figures reach the nodes through the webhook)."""
        self._touch()
        self._awaiting_allocatable -= {f.sample or "" for f in envelope.payload.items if f.node in self.model.nodes}

    async def on_action(self, envelope: Envelope[NodeAction], delivery: Delivery) -> None:
        """Every action is counted (a dry run apart); the node agent's kinds are carried out by
        the node's agent (the bridge carries out taints and evictions through
        the API server)."""
        action, t = envelope.payload, self.clock.t_s
        self._touch()
        by = action.requested_by or envelope.source
        self.record.actions[(by, action.kind + (" (dry run)" if action.dry_run else ""))] += 1
        self.record.asked[(action.kind, action.node, action.pod)] = by
        if envelope.cluster != self.settings.cluster:
            return
        result = await self.agents.on_action(action, cause=envelope)
        if result is not None and result.status == "done":
            self.record.happen(t, action.kind, action.node, action.pod, action.reason[:160], by)
            self.changed(action.node)

    async def on_action_result(self, envelope: Envelope[ActionResult], delivery: Delivery) -> None:
        result = envelope.payload
        if result.node in self.model.nodes:
            self._touch()
            self.record.results[(result.kind, result.status)] += 1

    # -- what the driver calls ---------------------------------------------------
    async def release(self, key: str) -> asyncio.Future:
        """The pod is submitted to the API server; the future resolves to
        "running" or "pending" once it is settled."""
        future = asyncio.get_running_loop().create_future()
        self.waiters[key] = future
        self.record.released_at[key] = elapsed()
        self._touch()
        self.model.arrive(key, self.clock.now())
        self.api.create_pod(pod_manifest(self.model.pods[key].request, self.clock.now()))
        return future

    async def tick(self) -> float:
        """Advance the clock; pods whose time is up leave; publish samples."""
        t = self.clock.advance()
        self.kubelets.finish(self.model.due(t))
        self.kubelets.heartbeat()
        await self.kubelets.idle.wait()
        await self.agents.expire()
        await self.publish_metrics()
        return t

    async def publish_metrics(self, force: bool = False) -> int:
        """A sample of each node that may have changed; the count published."""
        t, now, count = self.clock.t_s, self.clock.now(), 0
        for node in self.schedule.due(self.model, t, force):
            metrics = sample_node(self.model, node, t, now, self.clock.tick_s, self.usage_rng,
                                  self.agents.shared_pool(node))
            envelope = await self.emit(metrics)
            if self.settings.expect_allocatable:
                self._awaiting_allocatable.add(envelope.id)
            self.last_metrics[node] = metrics
            count += 1
        return count

    def sample_tick(self) -> TickSample:
        """What the report keeps of this moment."""
        sample = tick_sample(self.model, self.last_metrics, self.clock.t_s)
        self.record.ticks.append(sample)
        return sample

    async def settled(self, timeout: float | None = None, quiet_s: float | None = None) -> bool:
        """Wait until nothing came in for `settle_quiet_s` (or `quiet_s`)
        and, when expected, oversell answered every sample; False at
        `settle_max_s` (or `timeout`)."""
        s = self.settings
        deadline = elapsed() + (timeout if timeout is not None else s.settle_max_s)
        quiet_s = s.settle_quiet_s if quiet_s is None else quiet_s
        while True:
            quiet = elapsed() - self._last_input >= quiet_s
            if quiet and not self._awaiting_allocatable and self.kubelets.idle.is_set():
                return True
            if elapsed() > deadline:
                self._awaiting_allocatable.clear()  # an unanswered sample is not waited for twice
                return False
            await asyncio.sleep(min(max(s.settle_quiet_s / 2, 0.005), 0.05))

    # -- what the kubelets call ------------------------------------------------------
    def changed(self, node: str | None) -> None:
        """`node`'s pods changed: sample it, refresh its GPU figures."""
        if node in self.model.nodes:
            self.schedule.dirty.add(node)
            if self.ledger is not None:
                self.ledger.refresh(node)

    def settle(self, key: str, how: str) -> None:
        future = self.waiters.pop(key, None)
        if future is not None and not future.done():
            future.set_result(how)

    def _touch(self) -> None:
        self._last_input = elapsed()
