"""The simulator's pure parts: usage curves, pods as the bridge reads them,
the cluster model (admission, start, deletion), expectations, fairness and
the synthetic generator (the node agents in the loop and the usage sample:
`test_simulator_agents.py`) —
table-driven, expected arithmetic in comments."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np
import pytest

from tidal_simulator.topology_builder import make_topology
from tidal_bridge.pods import pod_lifecycle
from tidal_schemas import GpuAsk, GpuShare, Resources
from tidal_simulator.expectations import CountExpectation, Happening, NodeExpectation, OrderExpectation, \
    PodExpectation, check
from tidal_simulator.fairness import fairness, jain
from tidal_simulator.model import ClusterModel
from tidal_simulator.pods import pod_manifest, sim_pod
from tidal_simulator.synthetic import SyntheticSpec, generate, parse_spec
from tidal_simulator.usage_curves import Constant, Diurnal, Spike, UsageSpec, fraction_at
from tidal_simulator.workload import SimNode, SimPodSpec

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


# -- builders ---------------------------------------------------------------------
def spec(name: str, cpu: int = 1000, mem: int = 1024, gpu: GpuAsk = GpuAsk(), exclusive: bool = False,
         usage: UsageSpec = UsageSpec(), node: str | None = None, pin: tuple[int, ...] = (), qos: str = "BE",
         ns: str = "t") -> SimPodSpec:
    pod = sim_pod(ns, name, cpu_milli=cpu, memory_mib=mem, gpu=gpu, exclusive_cpus=exclusive, qos=qos)
    return SimPodSpec(pod, usage, node=node, pin_numa=pin)


def cluster(*pods: SimPodSpec, numa=(4, 4), gpus: int = 2, background=None, system_mib: int = 0,
            extra_nodes=()) -> ClusterModel:
    nodes = [SimNode(make_topology("n1", numa, gpus=gpus, memory_mib=16384), background or {}, system_mib),
             *extra_nodes]
    model = ClusterModel(nodes, pods)
    for p in pods:
        if p.node:
            assert model.place(p.key, p.node, T0, 0.0)[2] == ""
        else:
            model.arrive(p.key, T0)
    return model


# -- usage curves -----------------------------------------------------------------
@pytest.mark.parametrize("curve, t, z, expected", [
    (Constant(level=0.5), 100, 0.0, 0.5),
    (Diurnal(level=0.5, amplitude=0.2, period_s=400), 100, 0.0, 0.7),  # 0.5 + 0.2·sin(2π·100/400)
    (Diurnal(level=0.5, amplitude=0.2, period_s=400), 300, 0.0, 0.3),  # 0.5 + 0.2·sin(3π/2)
    (Spike(level=0.3, peak=0.9, start_s=60, duration_s=30), 59.9, 0.0, 0.3),
    (Spike(level=0.3, peak=0.9, start_s=60, duration_s=30), 60, 0.0, 0.9),
    (Spike(level=0.3, peak=0.9, start_s=60, duration_s=30), 90, 0.0, 0.3),  # [60, 90) only
    (Constant(level=0.5, noise=0.1), 0, 2.0, 0.6),  # 0.5 · (1 + 0.1·2)
    (Constant(level=0.5, noise=0.1), 0, -20.0, 0.0),  # 0.5 · (1 − 2) clamped at 0
])
def test_usage_curves(curve, t, z, expected):
    assert fraction_at(curve, t, z) == pytest.approx(expected)


# -- what a pod asks, as the bridge reads it ------------------------------------------
@pytest.mark.parametrize("pod", [
    sim_pod("t", "plain", cpu_milli=1500, memory_mib=3000),
    sim_pod("t", "whole", cpu_milli=2000, memory_mib=1024, gpu=GpuAsk(count=2, models=["A100", "V100"]),
            tenant="ml", user="bob", qos="LS", priority=100),
    sim_pod("t", "share", cpu_milli=0, memory_mib=0, gpu=GpuAsk(count=1, milli=250, kind="virtual"),
            evictable=True, labels={"app": "x"}),
    sim_pod("t", "excl", cpu_milli=4000, memory_mib=512, exclusive_cpus=True, cpu_policy="single-numa"),
])
def test_the_bridge_reads_a_simulated_pod_as_it_was_asked(pod):
    read = pod_lifecycle(pod_manifest(pod, T0))
    assert read.invalid_reason is None
    assert (read.event_key(), read.uid, read.phase, read.requests, read.gpu, read.tenant, read.user, read.qos,
            read.priority, read.evictable, read.exclusive_cpus, read.cpu_policy, read.foreign) == \
        (pod.event_key(), pod.uid, "pending", pod.requests, pod.gpu, pod.tenant, pod.user, pod.qos, pod.priority,
         pod.evictable, pod.exclusive_cpus, pod.cpu_policy, False)
    assert read.labels.items() >= pod.labels.items()


# -- start (admission is the kubelet's: test_simulator_kubelet.py) ------------------------
def test_a_started_pod_runs_with_the_gpus_its_containers_were_handed():
    model = cluster(spec("p", gpu=GpuAsk(count=1, milli=500)))
    model.start("t/p", "n1", [("gpu1", 500)], T0, 5.0)
    pod = model.pods["t/p"]
    assert (pod.phase, pod.node, pod.numa_cpus) == ("running", "n1", {})  # which CPUs: the node agent's business
    assert pod.gpus == (GpuShare(gpu="gpu1", milli=500, model="A100"),)
    assert model.gpu_free("n1") == {"gpu0": 1000, "gpu1": 500}  # 1000 − 500


def test_a_pod_its_kubelet_rejected_fails_and_holds_nothing():
    model = cluster(spec("p", cpu=2000))
    model.fail("t/p")
    assert model.pods["t/p"].phase == "failed" and model.running_on("n1") == []
    assert model.requested_on("n1") == Resources(cpu_milli=0, memory_mib=0, gpu_milli=0)


def test_a_deleted_pod_frees_what_it_held_once():
    model = cluster(spec("p", gpu=GpuAsk(count=1), node="n1"))
    model.delete("t/p")
    assert model.gpu_used["n1"] == {} and model.running_on("n1") == [] and model.pods["t/p"].phase == "deleted"
    assert model.cgroups["n1"].pods == {}  # its cgroup went with it
    model.delete("t/p")
    assert model.gpu_used["n1"] == {}


def test_pods_leave_when_their_run_time_is_over():
    timed = SimPodSpec(sim_pod("t", "job", cpu_milli=1000, memory_mib=1), duration_s=30.0, node="n1")
    model = cluster(timed)
    assert model.due(29.9) == [] and model.due(30.0) == ["t/job"]


def test_taints_are_what_the_node_object_says():
    model = cluster()
    assert model.set_taints("n1", ["k"]) == ({"k"}, set()) and model.taints["n1"] == {"k"}
    assert model.set_taints("n1", []) == (set(), {"k"}) and model.taints["n1"] == set()


# -- the usage sample ---------------------------------------------------------------
# -- expectations ---------------------------------------------------------------------
TIMELINE = [Happening(10, "freeze", "n1", "t/a"), Happening(20, "freeze", "n1", "t/b"),
            Happening(30, "taint", "n1"), Happening(5, "placed", "n2", "t/c")]
PODS = ["t/a", "t/b", "t/c", "t/d"]


@pytest.mark.parametrize("expectation, ok", [
    (NodeExpectation(kind="tainted", node="n1"), True),
    (NodeExpectation(kind="tainted", node="n1", by_s=25), False),  # tainted at 30 s
    (NodeExpectation(kind="not-tainted", node="n2"), True),
    (PodExpectation(kind="frozen", pod="a"), True),  # a bare name resolves to t/a
    (PodExpectation(kind="not-frozen", pod="t/a"), False),
    (PodExpectation(kind="placed", pod="t/c", node="n2"), True),
    (PodExpectation(kind="placed", pod="t/c", node="n1"), False),
    (PodExpectation(kind="pending", pod="t/d"), True),
    (OrderExpectation(kind="frozen-before", pod="t/a", then="t/b"), True),
    (OrderExpectation(kind="frozen-before", pod="t/b", then="t/a"), False),
    (OrderExpectation(kind="frozen-before", pod="t/a", then="t/d"), True),  # d never frozen
    (CountExpectation(kind="actions", action="freeze", min=2, max=2), True),
    (CountExpectation(kind="actions", action="freeze", min=3), False),
])
def test_expectations(expectation, ok):
    (verdict,) = check([expectation], TIMELINE, PODS)
    assert verdict.ok is ok, verdict


# -- fairness -------------------------------------------------------------------------
@pytest.mark.parametrize("values, expected", [
    ([1, 1, 1], 1.0), ([1, 0, 0], 1 / 3), ([3, 1], 16 / 20),  # (3+1)² / (2·(9+1))
    ([], None), ([0, 0], None),
])
def test_jain(values, expected):
    result = jain(values)
    assert result == expected if expected is None else result == pytest.approx(expected)


def test_fairness_by_resource_type():
    allocated = {"a": {"cpu": 3000}, "b": {"cpu": 1000}}
    demanded = {"a": {"cpu": 3000}, "b": {"cpu": 4000}}
    cpu = fairness(allocated, demanded)["cpu"]
    assert cpu["usage_share"] == {"a": 0.75, "b": 0.25}
    assert cpu["jain_usage_share"] == pytest.approx(0.8)  # (0.75+0.25)² / (2·(0.5625+0.0625))
    assert cpu["satisfaction"] == {"a": 1.0, "b": 0.25}
    assert cpu["jain_satisfaction"] == pytest.approx(round(1.25 ** 2 / (2 * (1 + 0.0625)), 4))


# -- the synthetic generator --------------------------------------------------------------
def test_synthetic_is_seeded_and_follows_its_spec():
    spec_ = parse_spec("nodes=6,pods=40,tenants=2,seed=3")
    one = generate(spec_, np.random.default_rng(3))
    two = generate(spec_, np.random.default_rng(3))
    other = generate(spec_, np.random.default_rng(4))
    assert one == two and one != other
    assert len(one.nodes) == 6 and len(one.pods) == 40
    assert {p.tenant for p in one.pods} <= {"team-0", "team-1"}
    assert all(p.arrive_s <= 0.6 * spec_.duration_s for p in one.pods)


@pytest.mark.parametrize("text, field", [("nodes=0", "nodes"), ("colour=red", "colour"), ("nodes", "key=value")])
def test_synthetic_spec_errors_name_the_field(text, field):
    with pytest.raises(ValueError, match=field):
        parse_spec(text)


def test_synthetic_without_gpu_nodes_asks_for_no_gpus():
    scenario = generate(SyntheticSpec(nodes=3, pods=30, gpu_nodes=0), np.random.default_rng(0))
    assert all(n.gpus == 0 for n in scenario.nodes) and all(p.gpu.count == 0 for p in scenario.pods)
    assert not math.isnan(sum(p.cpu_milli for p in scenario.pods))


# -- the bundled examples -------------------------------------------------------------
def test_bundled_demo_is_what_its_script_writes_and_has_its_situations():
    import importlib.util

    from conftest import ROOT
    from tidal_simulator.scenario import load_scenario, scenario_workload

    path = ROOT / "examples" / "make_demo.py"
    module_spec = importlib.util.spec_from_file_location("make_demo", path)
    make_demo = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(make_demo)
    committed = load_scenario(ROOT / "examples" / "demo" / "scenario.yaml")
    fresh = scenario_workload(make_demo.demo(), "fresh")
    assert [p.pod for p in committed.pods] == [p.pod for p in fresh.pods]
    assert [n.topology for n in committed.nodes] == [n.topology for n in fresh.nodes]
    assert len(committed.nodes) >= 20 and len(committed.pods) >= 200
    assert len({p.pod.tenant for p in committed.pods}) >= 3
    assert len({tuple(len(n.topology.numa_nodes) for n in committed.nodes)}) == 1  # one tuple of all counts
    assert len({len(n.topology.numa_nodes) for n in committed.nodes}) >= 2  # mixed NUMA layouts
    assert len({g.model for n in committed.nodes for g in n.topology.gpus}) >= 2  # mixed GPU models
    assert any(p.usage.memory.kind == "spike" and p.node == "spike-node" for p in committed.pods)
    assert sum(1 for p in committed.pods if p.node == "hot-node" and p.pin_numa == (1,)) == 3
    assert {e.kind for e in committed.expectations} >= {"tainted", "frozen-before"}


# -- the simulator plays the cluster, never the bridge ------------------------------------
def test_the_simulator_and_the_demo_have_no_code_path_that_builds_pod_events_or_bind_results():
    """Only the bridge publishes `pod.lifecycle` and `bind.result` in a simulated
    run or the demo (the `replay_*` files re-publish a recording into a
    sandbox: not a run); the node agents' core decides which actions the
    simulated machines carry out, the simulator does not."""
    from pathlib import Path

    from tidal_simulator.service import SimulatorService

    services = Path(__file__).resolve().parents[1] / "services"
    files = [*(services / "tidal_simulator").rglob("*.py"), services / "tidal_cli" / "demo_cmd.py",
             services / "tidal_cli" / "sample.py"]
    assert all(path.is_file() for path in files)
    offending = [f"{path.relative_to(services)}:{n}" for path in sorted(files)
                 if not path.name.startswith("replay_")
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if any(word in line for word in ("PodLifecycle(", "BindResult(", "PodLifecycle.model_",
                                                  "BindResult.model_", "ActionResult(", "bus.publish(",
                                                  "publish_envelope(PodLifecycle", "freeze_pod", "thaw_pod"))
                 and not (path.name == "cgroup_tree.py" and "def " in line)]
    assert offending == []
    assert not {"pod.lifecycle", "bind.result"} & set(SimulatorService.produces)
