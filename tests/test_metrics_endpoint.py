"""The scheduling metrics on /metrics over a real NATS server, scraped over
HTTP as Prometheus would: placement's pending pods by reason, attempts by
result, pending-to-bound latency, placements per strategy and GPU use per
model; scoring's fair-share score; oversell's allocatable per pool and its
node actions by reason."""

from __future__ import annotations

from datetime import datetime, timezone

from builders import pod
from conftest import make_bus, patience, start_service, stop_service, wait_until
from metrics_scrape import eventually, value
from tidal_bus import StartAt
from tidal_cli.sample import node
from tidal_oversell.service import OversellService
from tidal_oversell.settings import OversellSettings
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_schemas import BindResult, GpuAsk, NodeMetrics, NodeScore, NodeScores, NodeTopology, PeakEstimate, Resources
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings

HTTP = dict(http_port=0, http_host="127.0.0.1", cluster="c1")


async def _decision(bus, name: str):
    async for _, e in bus.read("placement.decision", StartAt.earliest()):
        for d in e.payload.items:
            if d.name == name and d.outcome == "placed":
                return d
    return None


async def test_placement_metrics(nats_server, namespace):
    service = PlacementService(PlacementSettings(bus_url=nats_server.url, namespace=namespace, gpu_strategy="best-fit",
                                                 bind_timeout_s=patience(30), **HTTP))
    task = await start_service(service)
    try:
        async with make_bus(nats_server.url, namespace) as bus:
            await bus.publish(node("n1", 1, 1, 4, 1, 64 * 1024, reserved=0))  # 4 CPUs
            await bus.publish(node("g1", 1, 1, 8, 1, 64 * 1024, gpus=[("A100", 40960)] * 2, reserved=0))  # 8 CPUs
            await bus.publish(pod("small", cpu_milli=1000))
            await bus.publish(pod("share", cpu_milli=1000, gpu=GpuAsk(count=1, milli=250, models=["A100"])))
            await wait_until(lambda: service.decisions >= 2, timeout=20, what="two placements")
            small = await _decision(bus, "small")
            await bus.publish(BindResult(decision_id=small.decision_id, namespace="default", name="small",
                                         node=small.node, ok=True))
            # 64 CPUs fit on neither node; "later" (a cpu pod ordered after it) is held back behind it.
            # Published once "huge" waits: a cycle that met "later" first would place it.
            await bus.publish(pod("huge", cpu_milli=64000))
            await eventually(service, lambda f: value(f, "tidal_scheduler_pending_pods", reason="cpu") == 1,
                             what="the pod no node fits pending")
            await bus.publish(pod("later", cpu_milli=1000))

            def settled(f) -> bool:
                # The gauge says "later" is held back as soon as "huge" waits; the
                # attempt that holds it back is counted when a cycle reaches it.
                return (value(f, "tidal_scheduler_pending_pods", reason="cpu") == 1
                        and value(f, "tidal_scheduler_pending_pods", reason="waiting") == 1
                        and value(f, "tidal_scheduler_attempts_total", code="wait") >= 1
                        and value(f, "tidal_scheduler_pod_scheduling_duration_seconds_count") == 1)

            families = await eventually(service, settled, what="pending pods by reason and a bound pod")
    finally:
        await stop_service(service, task)

    assert value(families, "tidal_scheduler_pending_pods", cluster="c1", reason="cpu", resource_type="cpu") == 1
    assert value(families, "tidal_scheduler_pending_pods", reason="waiting", resource_type="cpu") == 1
    assert value(families, "tidal_scheduler_pending_pods") == 2
    # Tidal's codes: 2 placed, "huge" tried at least once, "later" held back once
    assert value(families, "tidal_scheduler_attempts_total", code="placed") == 2
    assert value(families, "tidal_scheduler_attempts_total", code="unschedulable") >= 1
    assert value(families, "tidal_scheduler_attempts_total", code="wait") == 1
    # kube-scheduler's results: placed -> scheduled; unschedulable and wait (held back) -> unschedulable
    assert value(families, "scheduler_schedule_attempts_total", cluster="c1", result="scheduled") == 2
    unschedulable = value(families, "tidal_scheduler_attempts_total", code="unschedulable") + 1
    assert value(families, "scheduler_schedule_attempts_total", result="unschedulable") == unschedulable
    assert value(families, "scheduler_schedule_attempts_total", result="error") == 0
    # Every attempt timed but those right after a publish (the cycle was suspended): the first of each
    # cycle is timed, so at least one placement; none takes a second on this stack.
    timed = value(families, "scheduler_scheduling_attempt_duration_seconds_count", result="scheduled")
    assert 1 <= timed <= 2
    assert 0 < value(families, "scheduler_scheduling_attempt_duration_seconds_sum", result="scheduled") < timed
    assert value(families, "scheduler_scheduling_attempt_duration_seconds_count") <= value(
        families, "scheduler_schedule_attempts_total")
    # Queues: "later" is held back (unschedulable), "huge" waits for room (unschedulable, or backoff once room
    # may have appeared); nothing is gated, and the queues hold the same two pods as the reasons.
    assert value(families, "scheduler_pending_pods", cluster="c1", queue="unschedulable") >= 1
    assert value(families, "scheduler_pending_pods", queue="gated") == 0
    assert value(families, "scheduler_pending_pods") == 2
    # "share" was placed and no bind result came for it; "small"'s came
    assert value(families, "tidal_scheduler_binds_awaiting", cluster="c1") == 1
    assert value(families, "tidal_scheduler_stale_nodes", cluster="c1") == 0
    (info,) = [s for s in families["tidal_build_info"] if s.name == "tidal_build_info"]
    assert info.value == 1 and info.labels["version"] and info.labels["python"].count(".") == 2
    assert value(families, "tidal_scheduler_placements_total", strategy="best-fit") == 2
    # one bound pod, bound within the test's run; "share" has no bind result yet
    assert value(families, "tidal_scheduler_pod_scheduling_duration_seconds_bucket", le="+Inf") == 1
    assert 0 <= value(families, "tidal_scheduler_pod_scheduling_duration_seconds_sum") < 30
    # A100: 2 GPUs = 2000 milli; the share holds 250, leaving 750 on a partly used GPU
    assert value(families, "tidal_gpu_capacity_milli", model="A100") == 2000
    assert value(families, "tidal_gpu_allocated_milli", model="A100") == 250
    assert value(families, "tidal_gpu_fragmented_milli", model="A100") == 750


async def test_scoring_exports_fair_share_scores(nats_server, namespace):
    settings = ScoringSettings(bus_url=nats_server.url, namespace=namespace, period_s=0.2, settle_time="4s", **HTTP)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(pod("train", phase="running", node="n1", cpu_milli=4000, user="alice",
                              started_at=datetime.now(timezone.utc)))
    service = ScoringService(settings)
    task = await start_service(service)
    try:
        # both keys are published in one tick, one after the other: wait for the tick to end
        families = await eventually(
            service, lambda f: value(f, "tidal_fair_share_score", user="alice", resource_type="cpu") > 0
            and value(f, "tidal_fair_share_score", user="alice", resource_type="memory") > 0,
            what="alice's cpu and memory scores")
    finally:
        await stop_service(service, task)
    assert value(families, "tidal_fair_share_score", cluster="c1", user="alice", resource_type="memory") > 0


async def test_oversell_exports_allocatable_per_pool_and_actions(nats_server, namespace):
    now = datetime.now(timezone.utc)
    settings = OversellSettings(bus_url=nats_server.url, namespace=namespace, **HTTP)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(NodeTopology(node="n1", pool="batch", capacity=Resources(cpu_milli=8000, memory_mib=10000),
                                       allocatable=Resources(cpu_milli=8000, memory_mib=9000)))
        await bus.publish(NodeScores.of(NodeScore(node="n1", load=0.3, sampled_at=now, peak=PeakEstimate(
            estimator="percentile", window_s=300, samples=10, utilisation=0.2, memory_mib=200))))
        service = OversellService(settings)
        task = await start_service(service, ready=lambda s: s.action_log_ready.is_set())
        try:
            # memory 8800 of 10000: over the stop threshold (0.85), so the node is tainted
            await bus.publish(NodeMetrics(node="n1", sampled_at=now, interval_s=10, node_cpu_util=0.3,
                                          numa_load={0: 0.3}, cpu_used_milli=2000, memory_used_mib=8800,
                                          memory_total_mib=10000))
            families = await eventually(
                service, lambda f: value(f, "tidal_node_actions_total", action="taint") == 1, what="a taint")
        finally:
            await stop_service(service, task)
    granted = value(families, "tidal_oversell_allocatable", cluster="c1", pool="batch", resource="cpu", unit="core")
    assert granted > 0
    assert value(families, "tidal_oversell_node_allocatable", pool="batch", resource="cpu") == 8.0  # 8000 milli
    assert value(families, "tidal_oversell_node_allocatable", pool="batch", resource="memory") == 9000 * 2**20
    assert value(families, "tidal_node_actions_total", action="taint", reason="memory-pressure",
                 dry_run="false") == 1
