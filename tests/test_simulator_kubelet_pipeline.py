"""The kubelet stand-in on the real path (a real NATS server, the real
bridge between the simulated cluster's API server and the bus, the node
agents' device plugins over gRPC): containers get the GPUs the real
placement chose, read from the plugin's Allocate response; and decisions
forced onto the bus — no placement, no webhook — are bound by the bridge
and then judged by the node's kubelet, the run's audit reporting what
reached the node: a pod rejected by its kubelet (`failed-admission`) and a
container handed other GPUs than its decision's (`devices-not-decided`, a
fault injected in the kubelet's device path)."""

from __future__ import annotations

import argparse
import asyncio

from conftest import make_bus
from sim_placement import placement as real_placement, waits_for_nodes
from tidal_bus import StartAt
from tidal_cli import simulate_cmd
from tidal_schemas import GpuShare, PlacementDecision, PlacementDecisions
from tidal_simulator.node_devices import VISIBLE
from tidal_simulator.run import simulate

SCENARIO = """
name: forced
tick_s: 10
duration_s: 20
nodes: [{name: n1, numa_cpus: [8], gpus: 2}]
pods:
  - {name: big, tenant: t, cpu_milli: 6000, node: n1}
  - {name: more, tenant: t, cpu_milli: 3000}
  - {name: gpu, tenant: t, cpu_milli: 1000, gpu: {count: 1}, arrive_s: 10}
"""
FORCED = {"t/more": [], "t/gpu": [("gpu1", 1000)]}  # more: 6000 running + 3000 > 8000 allocatable


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    simulate_cmd.add(parser.add_subparsers())
    return parser.parse_args(["simulate", *argv])


def forcing(bus, sims: list):
    """A warm-up that places each pod of `FORCED` as it arrives (a decision
    on the bus, as a scheduler without fencing would), and hands the GPU
    pod's container another GPU than decided (gpu0 for gpu1)."""
    async def warmup(sim) -> None:
        sims.append(sim)
        release = sim.release

        async def release_then_decide(key: str):
            future = await release(key)
            pod = sim.model.pods[key].request
            await bus.publish(PlacementDecisions(items=[PlacementDecision(
                decision_id=f"forced-{pod.name}", namespace=pod.namespace, name=pod.name, uid=pod.uid,
                outcome="placed", node="n1", gpus=[GpuShare(gpu=g, milli=m) for g, m in FORCED[key]])]))
            return future
        sim.release = release_then_decide

        manager = sim.kubelets.devices.managers["n1"]
        allocate = manager.allocate

        async def wrong(*args, **kwargs):
            handed = await allocate(*args, **kwargs)
            handed.response.envs[VISIBLE] = "gpu0"
            return handed
        manager.allocate = wrong
    return warmup


async def test_forced_decisions_a_kubelet_rejects_or_hands_other_gpus_are_violations(nats_server, namespace,
                                                                                      tmp_path):
    scenario = tmp_path / "forced.yaml"
    scenario.write_text(SCENARIO)
    plan = simulate_cmd.build_plan(parse("--scenario", str(scenario), "--bus", nats_server.url, "--namespace",
                                         namespace, "--decision-timeout", "5"))
    sims: list = []
    async with make_bus(nats_server.url, namespace, cluster="sim") as bus:
        result = await asyncio.wait_for(simulate(plan, warmup=forcing(bus, sims), progress=lambda line: None), 90)
    sim = sims[0]
    more = sim.api.pod("t", "more")["status"]
    assert (more["phase"], more["reason"]) == ("Failed", "OutOfcpu")  # the API server bound it; the kubelet refused
    assert more["message"] == ("Pod was rejected: Node didn't have enough resource: cpu, requested: 3000, "
                               "used: 6000, capacity: 8000")
    assert sim.api.pod("t", "gpu")["status"]["phase"] == "Running"
    kubelets = result.report["kubelets"]
    assert kubelets["admission_failures_by_reason"] == {"OutOfcpu": 1} and kubelets["device_mismatches"] == 1
    lines = result.report["invariants"]["lines"]
    assert any(line.startswith("failed-admission: pod t/more placed on n1 by Tidal failed kubelet admission: "
                               "OutOfcpu") for line in lines), lines
    assert any(line.startswith("devices-not-decided: pod t/gpu on n1: its containers were handed GPUs "
                               "{gpu0: 1000}, its decision gives {gpu1: 1000}") for line in lines), lines
    # and the stream audit's own view of the forced decision: the bound pod over-allocates n1 (9000 > 8000)
    assert sorted(line.split(":")[0] for line in lines) == ["devices-not-decided", "failed-admission", "over-allocated"]
    assert result.violations == 3 and result.report["pods"]["failed"] == 1


SHARED = """
name: shared
tick_s: 10
duration_s: 10
nodes: [{name: n1, numa_cpus: [8], gpus: 4}]
pods:
  - {name: two, tenant: t, cpu_milli: 1000, gpu: {count: 2}}
  - {name: half, replicas: 2, tenant: t, cpu_milli: 500, gpu: {count: 1, milli: 500}}
"""


async def test_containers_get_the_gpus_placement_chose_from_the_device_plugin(nats_server, namespace, tmp_path):
    scenario = tmp_path / "shared.yaml"
    scenario.write_text(SHARED)
    plan = simulate_cmd.build_plan(parse("--scenario", str(scenario), "--bus", nats_server.url, "--namespace",
                                         namespace))
    placement = real_placement(nats_server.url, namespace)
    sims: list = []

    async def warmup(sim) -> None:
        sims.append(sim)
        await waits_for_nodes(placement, 1)(sim)
    task = asyncio.create_task(placement.run())
    try:
        result = await asyncio.wait_for(simulate(plan, warmup=warmup, progress=lambda line: None), 90)
    finally:
        placement.stop()
        await asyncio.gather(task, return_exceptions=True)
    assert result.violations == 0, result.report["invariants"]
    assert result.report["kubelets"] == {"admission_failures": 0, "admission_failures_by_reason": {},
                                         "device_mismatches": 0, "containers_with_devices": 3}
    async with make_bus(nats_server.url, namespace, cluster="sim") as bus:
        decided = {d.name: d async for _, e in bus.read("placement.decision", StartAt.earliest())
                   for d in e.payload.items if d.outcome == "placed"}
    handed = sims[0].kubelets.handed
    (two,) = handed["t/two"]
    chosen = [g.gpu for g in decided["two"].gpus]
    assert len(chosen) == 2 and two.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(chosen)  # from the Allocate response
    assert two.envs["TIDAL_DECISION_ID"] == decided["two"].decision_id and len(two.device_ids) == 2000
    halves = [handed[f"t/half-{i}"][0] for i in range(2)]
    shared = {h.envs["NVIDIA_VISIBLE_DEVICES"] for h in halves}
    assert len(shared) == 1 and shared <= {g.gpu for g in decided["half-0"].gpus}  # best-fit packs them together
    assert all(h.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50" and h.gpus[0][1] == 500 for h in halves)
    assert not set(chosen) & shared
