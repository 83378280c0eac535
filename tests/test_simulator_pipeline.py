"""The simulator on a real NATS server with the services in-process (the
real bridge between the simulated cluster's API server and the bus): the
arrive-only protocol on the small openb sample, bind-failure injection and
rollback, scenario expectations (met and not met) with the real remediation
service, the CLI's one-line error for a bad scenario, and the HTML report
in headless Chromium. Placement is the real service, in this process
(`sim_placement.py`)."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, make_bus, patience, wait_until
from sim_checks import pinning_problems
from sim_placement import placement as real_placement, waits_for_nodes
from tidal_bus import StartAt
from tidal_schemas import TenantConfig
from tidal_cli import main as cli
from tidal_cli import simulate_cmd
from tidal_simulator.openb import read_nodes, read_pods
from tidal_simulator.openb_replay import arrival_sequence
from tidal_remediation.service import RemediationService
from tidal_remediation.settings import RemediationSettings
from tidal_simulator.run import simulate
from tidal_topology.audit import KINDS

SAMPLE = ROOT / "tests" / "fixtures" / "openb_sample"
CHROMIUM = Path("/usr/bin/chromium")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    simulate_cmd.add(parser.add_subparsers())
    return parser.parse_args(["simulate", *argv])


def keeping(sims: list, warmup):
    """`warmup`, keeping the simulator it is given in `sims`."""
    async def keep(sim) -> None:
        sims.append(sim)
        await warmup(sim)
    return keep


async def run_with(services, plan, warmup):
    tasks = [asyncio.create_task(s.run()) for s in services]
    try:
        return await asyncio.wait_for(simulate(plan, warmup=warmup, progress=lambda line: None), patience(60))
    finally:
        for s in services:
            s.stop()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture(scope="module")
async def arrive_only_run(nats_server, tmp_path_factory):
    namespace = "simao" + tmp_path_factory.mktemp("x").name[-6:].replace("_", "")
    args = parse("--nodes", str(SAMPLE / "node_list.csv"), "--pods", str(SAMPLE / "pod_list.csv"), "--arrive-only",
                 "--inflate", "1.3", "--seed", "7", "--bus", nats_server.url, "--namespace", namespace)
    plan = simulate_cmd.build_plan(args)
    placement = real_placement(nats_server.url, namespace)
    return plan, await run_with([placement], plan, waits_for_nodes(placement, len(plan.workload.nodes)))


async def test_arrive_only_protocol_on_the_openb_sample(arrive_only_run):
    plan, result = arrive_only_run
    report = result.report
    assert result.violations == 0 and report["invariants"] == {"violations": 0, "lines": []}
    nodes, pods = read_nodes(SAMPLE / "node_list.csv"), read_pods(SAMPLE / "pod_list.csv")
    capacity = 1000 * sum(n.gpus for n in nodes)  # 2 + 4 + 8 GPUs = 14000 milli
    sequence = arrival_sequence(pods, 7, capacity, 1.3)
    # the pods released are the protocol's sequence, in its order, and they reach the inflation target
    assert [k.split("/", 1)[1] for k in plan.order] == [p.name for p in sequence]
    arrived = sum(p.gpu_total for p in sequence)
    assert arrived >= 1.3 * capacity - 1000  # stops at the first sample whose per-GPU milli passes the target
    assert report["gpu"]["arrived_pct_final"] == pytest.approx(100 * arrived / capacity, abs=0.01)
    # allocation never falls (nothing departs) and never exceeds what arrived or the capacity
    lines = report["gpu"]["allocation_pct_by_arrived"]
    values = [v for v in lines.values() if v is not None]
    assert values == sorted(values) and len(values) >= 3
    assert all(0 <= v <= 100 for v in values)
    assert all(v <= int(level) + 1 for level, v in lines.items() if v is not None)
    pods_section = report["pods"]
    assert pods_section["arrived"] == len(sequence)
    assert pods_section["running"] + pods_section["pending"] == len(sequence)
    assert sum(pods_section["pending_by_reason"].values()) == pods_section["pending"]
    assert report["decisions"]["count"] >= len(sequence)
    latency = report["decisions"]["latency_ms"]
    assert latency["pods"] == len(sequence) and 0 < latency["p50"] <= latency["p99"]
    assert 0 < report["cpu"]["requested_pct_final"] <= 100
    assert report["gpu"]["unallocated_gpus_final"] == pytest.approx(
        capacity / 1000 * (1 - report["gpu"]["allocated_pct_final"] / 100), abs=0.01)
    for kind in ("cpu", "memory"):
        jain = report["fairness"][kind]["jain_usage_share"]
        assert 1 / report["fairness"][kind]["tenants"] - 1e-9 <= jain <= 1 + 1e-9


async def test_an_injected_bind_failure_is_rolled_back_and_the_pod_placed_later(nats_server, namespace, tmp_path):
    scenario = tmp_path / "binds.yaml"
    scenario.write_text("""
name: binds
tick_s: 10
duration_s: 20
nodes: [{name: n1, numa_cpus: [8], gpus: 2}]
pods:
  - {name: train, replicas: 4, tenant: t, cpu_milli: 1000, gpu: {count: 1, milli: 500}}
  - {name: db, tenant: t, cpu_milli: 3000, exclusive_cpus: true, arrive_s: 10}
expect:
  - {kind: placed, pod: train-0}
  - {kind: placed, pod: train-3}
  - {kind: placed, pod: db}
""")
    # seed 5: the first draw of the bind-failure generator is below 0.5, so the first bind fails
    args = parse("--scenario", str(scenario), "--bind-failure-rate", "0.5", "--seed", "5", "--bus", nats_server.url,
                 "--namespace", namespace)
    plan = simulate_cmd.build_plan(args)
    placement = real_placement(nats_server.url, namespace)
    sims = []
    result = await run_with([placement], plan, keeping(sims, waits_for_nodes(placement, 1)))
    binds = result.report["pods"]["bind_results"]
    assert binds["failed"] >= 1 and binds["ok"] == 5
    assert result.failed_expectations == 0 and result.report["pods"]["running"] == 5
    # the node's agent pinned the exclusive pod to the CPUs it holds, and every other pod off them
    sim = sims[0]
    held = sim.agents.held("n1", "t/db")
    assert len(held) == 3 and sim.model.cgroups["n1"].pod_cpuset(sim.model.pods["t/db"].request.uid) == list(held)
    assert pinning_problems(sim) == []
    assert result.report["node_agents"]["audit_violations"] == dict.fromkeys(KINDS, 0)
    async with make_bus(nats_server.url, namespace, cluster="sim") as bus:
        result_events = [e async for _, e in bus.read("bind.result", StartAt.earliest())]
        lifecycle_events = [e async for _, e in bus.read("pod.lifecycle", StartAt.earliest())]
    # the simulated cluster publishes no pod event and no bind result: the bridge does, from its API server
    assert {e.source for e in result_events + lifecycle_events} == {"bridge"}
    results, lifecycle = [e.payload for e in result_events], [e.payload for e in lifecycle_events]
    failed = [r for r in results if not r.ok]
    assert failed and all("injected bind failure" in r.reason for r in failed)
    first_failed = failed[0].event_key()
    assert any(r.ok and r.event_key() == first_failed for r in results), "placed after its failed bind"
    # every failed bind was rolled back and the pod decided again: one placed decision per bind
    async with make_bus(nats_server.url, namespace, cluster="sim") as bus:
        decisions = [d async for _, e in bus.read("placement.decision", StartAt.earliest()) for d in e.payload.items]
    assert sum(1 for d in decisions if d.outcome == "placed") == binds["ok"] + binds["failed"]
    running = [p for p in lifecycle if p.phase == "running" and p.name.startswith("train")]
    assert sorted(p.event_key() for p in running) == [f"t/train-{i}" for i in range(4)]
    # what each pod holds is what its decision wrote on it, read back by the bridge
    assert all(len(p.gpus) == 1 and p.gpus[0].milli == 500 for p in running)
    assert result.violations == 0


async def test_the_node_agents_follow_a_placement_leader_fenced_before_the_simulation_started(nats_server, namespace,
                                                                                              tmp_path):
    scenario = tmp_path / "late.yaml"
    scenario.write_text("""
name: late
tick_s: 10
duration_s: 10
nodes: [{name: n1, numa_cpus: [4, 4]}]
pods: [{name: db, tenant: t, cpu_milli: 2000, exclusive_cpus: true}]
""")
    placement = real_placement(nats_server.url, namespace)
    task = asyncio.create_task(placement.run())
    try:
        async with make_bus(nats_server.url, namespace, cluster="sim") as bus:  # placement learns of the cluster
            await bus.publish(TenantConfig(tenant="t"))
            await wait_until(lambda: "sim" in placement.active, timeout=30, what="placement fenced the cluster")
            fences = [e async for _, e in bus.read("placement.decision", StartAt.earliest())]
        assert [[d.outcome for d in e.payload.items] for e in fences] == [["fence"]]
        await asyncio.sleep(1.5)  # older than what the simulator follows from its start (1 s before it)
        plan = simulate_cmd.build_plan(parse("--scenario", str(scenario), "--bus", nats_server.url,
                                             "--namespace", namespace))
        sims = []
        result = await asyncio.wait_for(simulate(plan, warmup=keeping(sims, waits_for_nodes(placement, 1)),
                                                 progress=lambda line: None), 60)
    finally:
        placement.stop()
        await asyncio.gather(task, return_exceptions=True)
    assert result.report["pods"]["running"] == 1 and result.violations == 0
    held = sims[0].agents.held("n1", "t/db")
    assert len(held) == 2 and pinning_problems(sims[0]) == []
    async with make_bus(nats_server.url, namespace, cluster="sim") as bus:
        given = [e.payload async for _, e in bus.read("cpu.assignment", StartAt.earliest())]
    # claimed when the agent read the leader's decision (one that counts), not adopted later from the bound pod
    assert [(a.pod, a.reason.split()[0]) for a in given] == [("t/db", "decision")], given


HOTSPOT = """
name: hotspot
tick_s: 10
duration_s: 60
nodes:
  - {name: n1, numa_cpus: [8, 8], reserved_cpus: [0]}
  - {name: n2, numa_cpus: [8, 8], reserved_cpus: [0]}
pods:
  # NUMA 1 of n1: (3800 + 3000) / 8000 = 0.85 > 0.8; hot-a uses more, so it is frozen first
  - {name: hot-a, tenant: t, cpu_milli: 4000, node: n1, numa: [1], usage: {cpu: {level: 0.95}}}
  - {name: hot-b, tenant: t, cpu_milli: 3000, node: n1, numa: [1], usage: {cpu: {level: 1.0}}}
  - {name: web, tenant: u, cpu_milli: 1000, qos: LS, arrive_s: 10}
expect:
  - {kind: frozen-before, pod: hot-a, then: hot-b}
  - {kind: placed, pod: web}
  - {kind: tainted, node: n2}
"""


async def test_scenario_expectations_met_and_not_met(nats_server, namespace, tmp_path):
    scenario = tmp_path / "hotspot.yaml"
    scenario.write_text(HOTSPOT)
    args = parse("--scenario", str(scenario), "--bus", nats_server.url, "--namespace", namespace)
    plan = simulate_cmd.build_plan(args)
    placement = real_placement(nats_server.url, namespace)
    remediation = RemediationService(RemediationSettings(bus_url=nats_server.url, namespace=namespace, cluster="sim",
                                                         http_port=0, http_host="127.0.0.1", freeze="enabled"))
    sims = []
    result = await run_with([placement, remediation], plan, keeping(sims, waits_for_nodes(placement, 2)))
    verdicts = {e["expect"]: e["ok"] for e in result.report["expectations"]}
    assert verdicts == {"pod hot-a is frozen before pod hot-b": True, "pod web is placed": True,
                        "node n2 gets tainted": False}
    assert result.failed_expectations == 1 and result.violations == 0, result.report["invariants"]
    assert result.report["actions"]["requested"]["remediation"]["freeze"] >= 1
    assert result.report["actions"]["results"]["freeze/done"] >= 1
    # the freeze was the node agent's, written to the machine's cgroup tree
    tree, hot_a = sims[0].model.cgroups["n1"], sims[0].model.pods["t/hot-a"].request.uid
    assert ("freeze", hot_a, "frozen") in tree.writes
    assert result.report["node_agents"]["cgroup_writes"]["freeze"] >= 1
    # hot-a and hot-b were pinned to NUMA 1 (CPUs 8–15 of 8 + 8, none exclusive) by the agent
    assert tree.pod_cpuset(hot_a) == list(range(8, 16)) and pinning_problems(sims[0]) == []
    assert "FAIL" in result.html and "node n2 gets tainted" in result.html
    assert "The node agents' own audits at the end:</p>" in result.html  # a table of them (test_report_text.py)
    assert "<tr><td>double-booked</td><td>0</td></tr>" in result.html


@pytest.mark.parametrize("document, field", [
    ("nodes: [{name: n1, numa_cpus: [8]}]\npods: [{name: p, cpu_mili: 100}]", "pods.0.cpu_mili"),
    ("nodes: [{name: n1}]\npods: [{name: p, usage: {cpu: {kind: wobble}}}]", "pods.0.usage.cpu"),
    ("nodes: []", "nodes"),
    ("nodes: [{name: n1}]\nexpect: [{kind: frozen-before, pod: a}]", "expect.0.frozen-before.then"),
    ("nodes: [{name: n1}]\npods: [{name: p, node: n7}]", "pods.0.node"),
    ("nodes: [{name: n1, numa_cpus: [8]\n", "not valid YAML"),
])
def test_an_invalid_scenario_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, document, field):
    path = tmp_path / "bad.yaml"
    path.write_text(document)
    assert simulate_cmd in cli.COMMANDS
    code = cli.main(["simulate", "--scenario", str(path), "--bus", "nats://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"tidal: {path}") and field in err, err


async def test_html_report_renders_in_chromium(arrive_only_run, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: headless Chromium is needed to render the report "
                    "(Debian package 'chromium'; `make test` installs it)")
    _, result = arrive_only_run
    page = tmp_path / "report.html"
    page.write_text(result.html)
    assert "<script" not in result.html and "http://" not in result.html.replace("http://www.w3.org/2000/svg", "")
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=patience(60))
    dom = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    for plot in ("plot-allocation", "plot-numa-heatmap", "plot-usage-share", "plot-actions"):
        assert f'id="{plot}"' in dom, plot
    assert dom.count("<polyline") >= 1 and "GPU allocation vs arrived load" in dom
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
