"""One simulation run end to end, over a bus where the real services run:
start the simulator in this process and the real bridge against its API
server (`bridge.py`), let the services take in the cluster,
drive the pods, check the expectations, audit the streams of its cluster in
its namespace, from the earliest event (`tidal_audit`: the §F invariants)
and, beside them, what its kubelets did (`tidal_audit.at_the_node`: the
devices each container was handed are its decision's, no pod Tidal placed
failed admission), collect the fair-share scores the scoring service
published, and build the report (and the HTML page)."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tidal_audit import AdmissionFailure, ContainerDevices, at_the_node, audit
from tidal_audit import read_streams
from tidal_bus import StartAt
from tidal_clock import elapsed, now_utc
from tidal_schemas import SchemaError, UserScore

from .bridge import BridgeStarter, in_process_bridge
from .driver import attach_ledger, run_arrive_only, run_timed, stderr_progress
from .expectations import check
from .html_report import render_html
from .report import build_report
from .service import SimulatorService
from .settings import SimulatorSettings
from .workload import Workload

MAX_SCORES = 20_000
MAX_LINES = 200  # violations listed in the report (all are counted)


@dataclass
class RunPlan:
    """What to run: the workload, and for the arrive-only protocol the
    arrival order (pod keys) and the shapes fragmentation is measured
    against."""

    workload: Workload
    settings: SimulatorSettings
    arrive_only: bool = False
    order: Sequence[str] = ()
    shapes: Sequence[Any] | None = None
    reference: dict[str, dict[str, float]] = field(default_factory=dict)
    progress_every: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # a folder of the run's own (the kubeconfig of a run against a given bus),
    # made when first written and removed when the run ends: what it holds
    # names an API server that is gone then
    scratch: Path | None = None


@dataclass
class RunResult:
    report: dict[str, Any]
    html: str
    failed_expectations: int
    violations: int = 0


async def simulate(plan: RunPlan, *, warmup: Callable[[SimulatorService], Awaitable[None]] | None = None,
                   progress: Callable[[str], None] = stderr_progress,
                   bridge: BridgeStarter = in_process_bridge) -> RunResult:
    """Run `plan` (see the module docstring)."""
    started, started_utc = elapsed(), now_utc()
    sim = SimulatorService(plan.settings, workload=plan.workload)
    task = asyncio.create_task(sim.run(), name="simulator")
    stop_bridge = None
    try:
        while not sim.ready()[0]:
            if task.done():
                task.result()  # raises the reason it stopped
                raise RuntimeError("the simulator stopped before it was ready")
            await asyncio.sleep(0.02)
        stop_bridge = await bridge(sim)
        # the machines' gRPC (device plugins, kubelets) once the bridge is started: a process forked
        # while gRPC runs here can crash before it execs (see tidal_simulator/__init__.py)
        await sim.kubelets.start()
        await sim.caught_up()
        if warmup is not None:
            await warmup(sim)
        attach_ledger(sim, plan.shapes)
        release_started = elapsed()
        if plan.arrive_only:
            await run_arrive_only(sim, list(plan.order), batch=plan.settings.batch,
                                  progress_every=plan.progress_every, progress=progress)
        else:
            await run_timed(sim, progress_every=plan.progress_every, progress=progress)
        release_wall = elapsed() - release_started
        if stop_bridge is not None:  # the run has settled: the audit reads a finished cluster
            await sim.settled()
            await stop_bridge()
            stop_bridge = None
        events = await read_streams(sim.bus)
        violations = audit(events, cluster=sim.settings.cluster)
        at_node = at_the_node(events, kubelet_devices(sim), kubelet_failures(sim), cluster=sim.settings.cluster)
        violations += at_node
        scores = await fair_share_scores(sim, started_utc)
        keys = list(sim.model.pods)
        verdicts = check(plan.workload.expectations, sim.record.timeline, keys)
        report = build_report(plan.workload, sim.record, sim.model, wall_s=elapsed() - started,
                              release_wall_s=release_wall, verdicts=verdicts, fair_share=scores,
                              extra={**plan.extra, "bind_failure_rate": plan.settings.bind_failure_rate,
                                     "seed": plan.settings.seed, "clock": plan.settings.clock,
                                     "tick_s": sim.clock.tick_s})
        report["invariants"] = {"violations": len(violations), "lines": [v.line() for v in violations[:MAX_LINES]]}
        report["node_agents"] = await sim.agents.summary()
        report["kubelets"] = {"admission_failures": len(sim.kubelets.rejected),
                              "admission_failures_by_reason": dict(Counter(r.reason for r in sim.kubelets.rejected)),
                              "device_mismatches": sum(1 for v in at_node if v.invariant == "devices-not-decided"),
                              "containers_with_devices": sum(len(h) for h in sim.kubelets.handed.values())}
        if plan.reference:
            report["reference"] = {"source": "published_results_default.csv (median of 10 seeds)",
                                   "allocation_pct_by_arrived": plan.reference}
        html = render_html(report, sim.record, scores, plan.reference)
        return RunResult(report, html, sum(1 for v in verdicts if not v.ok), len(violations))
    finally:
        if stop_bridge is not None:
            await stop_bridge()
        sim.stop()
        try:
            await asyncio.wait_for(task, 30)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            task.cancel()
        if plan.scratch is not None:
            shutil.rmtree(plan.scratch, ignore_errors=True)


def kubelet_devices(sim: SimulatorService) -> list[ContainerDevices]:
    """What each container was handed by a device plugin, as the audit reads
    it; a pod its kubelet admitted without devices is one record with none."""
    return [ContainerDevices(h.pod, h.uid, h.node, h.container, h.gpus)
            for handed in sim.kubelets.handed.values() for h in handed] + \
        [ContainerDevices(key, uid, node, "", ()) for key, (uid, node) in sim.kubelets.admitted_bare.items()]


def kubelet_failures(sim: SimulatorService) -> list[AdmissionFailure]:
    return [AdmissionFailure(r.pod, r.uid, r.node, r.reason, r.message) for r in sim.kubelets.rejected]


async def fair_share_scores(sim: SimulatorService, since: datetime) -> list[dict]:
    """The `score.user` events of this cluster published since `since`,
    as (t = seconds since then, user, resource type, score)."""
    found: list[dict] = []
    async for _, event in sim.bus.read("score.user", StartAt.at_time(since)):
        if isinstance(event, SchemaError) or event.cluster != sim.settings.cluster:
            continue
        score: UserScore = event.payload
        found.append({"t": round((score.updated_at - since).total_seconds(), 3), "user": score.user,
                      "resource_type": score.resource_type, "score": score.score})
        if len(found) >= MAX_SCORES:
            break
    return found
