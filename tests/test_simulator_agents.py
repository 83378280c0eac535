"""The node agents in the simulated machines: the agent's own core on each
machine's cgroup tree in memory, fed the events a node agent reads (pods as
the bridge reads their objects, decisions, bind results, actions). Its
books follow the agent's lifecycle (claimed at the decision, confirmed at
the bind, released on a failed bind, the bind timeout or the deletion); it
pins, freezes, thaws and moves pods by writing the tree; the usage sample
reads the tree."""

from __future__ import annotations

import itertools
from datetime import datetime, timezone

import pytest

from tidal_bridge.pods import pod_lifecycle
from tidal_schemas import BindResult, CpuAssignment, GpuAsk, NodeAction, PlacementDecision
from tidal_schemas.decision_codec import write_decision
from tidal_simulator.agents import NodeAgents
from tidal_simulator.model import ClusterModel
from tidal_simulator.pods import pod_manifest, sim_pod
from tidal_simulator.sampling import sample_node
from tidal_simulator.topology_builder import make_topology
from tidal_simulator.usage_curves import Constant, UsageSpec
from tidal_simulator.workload import SimNode, SimPodSpec

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def spec(name: str, cpu: int = 1000, exclusive: bool = False, usage: UsageSpec = UsageSpec(), qos: str = "BE",
         gpu: GpuAsk = GpuAsk()) -> SimPodSpec:
    return SimPodSpec(sim_pod("t", name, cpu_milli=cpu, memory_mib=1024, exclusive_cpus=exclusive, qos=qos, gpu=gpu),
                      usage)


class Machines:
    """A model of n1 (NUMA 0: CPUs 0–3, NUMA 1: CPUs 4–7; CPU 0 reserved)
    and n2, their agents, and what the agents published."""

    def __init__(self, *specs: SimPodSpec, background=None) -> None:
        nodes = [SimNode(make_topology("n1", (4, 4), reserved=[0], memory_mib=16384), background or {}),
                 SimNode(make_topology("n2", (4,), memory_mib=16384))]
        self.model = ClusterModel(nodes, specs)
        self.published: list = []

        async def publish(payload, cause=None, delivery=None, discriminator="") -> None:
            self.published.append(payload)
        self.agents = NodeAgents((n.topology for n in nodes), self.model.cgroups, publish)
        self.tree = self.model.cgroups["n1"]
        for s in specs:
            self.model.arrive(s.key, T0)

    def uid(self, name: str) -> str:
        return self.model.pods[f"t/{name}"].request.uid

    def decision(self, name: str, numa_cpus=None, node: str = "n1", decision_id: str = "d1") -> PlacementDecision:
        return PlacementDecision(decision_id=decision_id, namespace="t", name=name, uid=self.uid(name),
                                 outcome="placed", node=node, numa_cpus=numa_cpus or {})

    def pod(self, name: str, phase: str = "Running", decision: PlacementDecision | None = None, deleted=False):
        """The pod as the bridge reads its object."""
        request = self.model.pods[f"t/{name}"].request
        annotations = write_decision(decision) if decision else None
        return pod_lifecycle(pod_manifest(request, T0, node="n1", phase=phase, annotations=annotations),
                             deleted=deleted)

    async def run(self, name: str, numa_cpus=None, decision_id: str = "d1") -> PlacementDecision:
        """Decided, bound (the kubelet starts it, the agent's scan pins it), running."""
        d = self.decision(name, numa_cpus, decision_id=decision_id)
        await self.agents.on_decision(d)
        self.model.start(f"t/{name}", "n1", [], T0, 0.0)  # the kubelet admitted it (no GPUs asked)
        await self.agents.rescan("n1")
        await self.agents.on_pod(self.pod(name, decision=d))
        return d

    def announced(self, released: bool) -> list[tuple[str, list[int]]]:
        return [(p.pod, p.cpuset) for p in self.published if isinstance(p, CpuAssignment) and p.released == released]


# -- the books' lifecycle, as the agent keeps it -------------------------------------------
async def test_exclusive_cpus_are_claimed_at_the_decision_pinned_in_the_tree_and_released_at_the_deletion():
    m = Machines(spec("p", cpu=2000, exclusive=True), spec("s"))
    await m.agents.on_decision(m.decision("p", {1: 2}))
    held = m.agents.held("n1", "t/p")
    assert len(held) == 2 and set(held) <= {4, 5, 6, 7}  # claimed before any bind, on the decided NUMA node
    assert m.announced(False) == [("t/p", list(held))] and m.tree.pods == {}  # no pod cgroup yet
    await m.run("p", {1: 2})
    await m.run("s", decision_id="d2")
    assert m.tree.pod_cpuset(m.uid("p")) == list(held)  # the exclusive pod is pinned to its CPUs
    assert m.tree.pod_cpuset(m.uid("s")) == sorted(set(range(8)) - set(held))  # the shared pod kept off them
    assert m.agents.shared_pool("n1") == sorted(set(range(8)) - set(held))  # reserved CPU 0 stays shared
    m.model.delete("t/p")
    assert m.agents.held("n1", "t/p") == held  # the kubelet removed the cgroup; the agent has not read of it yet
    await m.agents.on_pod(m.pod("p", deleted=True))
    assert m.agents.held("n1", "t/p") == () and m.announced(True) == [("t/p", list(held))]
    assert m.tree.pod_cpuset(m.uid("s")) == list(range(8))  # the shared pod widened back to every CPU


async def test_a_failed_bind_gives_the_claim_back():
    m = Machines(spec("p", cpu=2000, exclusive=True))
    d = m.decision("p", {0: 2})
    await m.agents.on_decision(d)
    assert m.agents.held("n1", "t/p")
    await m.agents.on_bind_result(BindResult(decision_id=d.decision_id, namespace="t", name="p", node="n1", ok=False,
                                             reason="injected"))
    assert m.agents.held("n1", "t/p") == () and len(m.announced(True)) == 1


async def test_a_claim_not_bound_in_time_expires_and_a_bound_one_does_not():
    m = Machines(spec("p", cpu=1000, exclusive=True), spec("q", cpu=1000, exclusive=True))
    await m.agents.on_decision(m.decision("p", {0: 1}))
    await m.run("q", {1: 1}, decision_id="d2")
    await m.agents.expire(timeout_s=0.0)
    assert m.agents.held("n1", "t/p") == () and len(m.agents.held("n1", "t/q")) == 1


async def test_a_decision_placed_elsewhere_releases_the_claim_on_the_first_node():
    m = Machines(spec("p", cpu=1000, exclusive=True))
    await m.agents.on_decision(m.decision("p", {0: 1}))
    await m.agents.on_decision(m.decision("p", {0: 1}, node="n2", decision_id="d2"))
    assert m.agents.held("n1", "t/p") == ()


# -- actions: the agent's own handling, written to the tree ---------------------------------------
ACTION_IDS = itertools.count(1)


def action(kind: str, pod: str | None = "t/p", node: str = "n1", action_id: str = "", **fields) -> NodeAction:
    """An action of its own id unless one is named (an id is one decision: the agent answers it once)."""
    return NodeAction(action_id=action_id or f"a-{kind}-{next(ACTION_IDS)}", node=node, kind=kind, pod=pod,
                      reason="test", **fields)


@pytest.mark.parametrize("act, status, words", [
    (action("freeze"), "done", "frozen"),
    (action("set-cpuset", target_numa=1), "done", "NUMA 1"),
    (action("freeze", pod="t/nobody"), "unknown-pod", "no pod"),
    (action("freeze", node="n2"), "refused", "runs on n1"),
    (action("set-cpuset", cpuset=[0, 1]), "refused", "the node agent chooses the CPUs"),
    (action("set-cpuset", target_numa=7), "refused", "NUMA node 7 is not on this node"),
    (action("freeze", dry_run=True), "skipped", "dry run"),
])
async def test_every_agent_action_is_answered_by_the_agent(act, status, words):
    m = Machines(spec("p"))
    await m.run("p")
    if act.node == "n2":  # n2's agent has read that the pod runs on n1
        await m.agents.cores["n2"].on_pod(m.pod("p"))
    result = await m.agents.on_action(act)
    assert (result.status, words in result.reason) == (status, True), result.reason
    assert m.published[-1] == result


async def test_an_action_for_a_node_that_is_not_simulated_is_not_answered():
    m = Machines(spec("p"))
    assert await m.agents.on_action(action("freeze", node="n9")) is None


async def test_freeze_and_thaw_are_written_to_the_tree_and_a_frozen_pod_uses_no_cpu():
    m = Machines(spec("p", cpu=4000, usage=UsageSpec(cpu=Constant(level=1.0))))
    await m.run("p")
    pool = m.agents.shared_pool("n1")
    assert (await m.agents.on_action(action("freeze"))).status == "done"
    assert m.tree.pod_frozen(m.uid("p")) and ("freeze", m.uid("p"), "frozen") in m.tree.writes
    frozen = sample_node(m.model, "n1", 0.0, T0, 10.0, shared_pool=pool)
    assert frozen.pods[0].frozen and frozen.pods[0].cpu_milli == 0 and set(frozen.numa_load.values()) == {0.0}
    assert (await m.agents.on_action(action("thaw"))).status == "done"
    assert not m.tree.pod_frozen(m.uid("p")) and m.tree.counts["thaw"] == 1
    assert sample_node(m.model, "n1", 0.0, T0, 10.0, shared_pool=pool).pods[0].cpu_milli == 4000


async def test_an_action_seen_again_gets_its_first_answer_and_is_not_carried_out_again():
    m = Machines(spec("p"))
    early = await m.agents.on_action(action("freeze", action_id="f1"))  # the pod is not read yet
    await m.run("p")
    again = await m.agents.on_action(action("freeze", action_id="f1"))  # a re-send that crossed the answer
    assert (early.status, again.status) == ("unknown-pod", "unknown-pod") and not m.tree.pod_frozen(m.uid("p"))
    assert m.published[-1] == again and again.acted_at == early.acted_at is not None  # the first answer, as it was
    # a freeze redelivered after its pod's thaw leaves the pod thawed
    frozen = action("freeze", action_id="f2")
    assert (await m.agents.on_action(frozen)).status == "done"
    assert (await m.agents.on_action(action("thaw"))).status == "done"
    assert (await m.agents.on_action(frozen)).status == "done" and not m.tree.pod_frozen(m.uid("p"))
    assert m.tree.counts["freeze"] == 1


async def test_a_move_goes_through_the_agents_books_and_loads_the_new_numa_node():
    m = Machines(spec("p", cpu=2000, exclusive=True, usage=UsageSpec(cpu=Constant(level=1.0))),
                 spec("s", usage=UsageSpec(cpu=Constant(level=0.0))), spec("q", cpu=4000, exclusive=True))
    await m.run("p", {0: 2})
    await m.run("s", decision_id="d2")
    assert (await m.agents.on_action(action("set-cpuset", target_numa=1, cpu_count=2))).status == "done"
    held = m.agents.held("n1", "t/p")
    assert set(held) <= {4, 5, 6, 7} and m.tree.pod_cpuset(m.uid("p")) == list(held)
    assert m.announced(False)[-1] == ("t/p", list(held))  # announced as the agent announces a move
    # 2000 milli over the two moved CPUs (the shared pod uses nothing)
    loads = sample_node(m.model, "n1", 0.0, T0, 10.0, shared_pool=m.agents.shared_pool("n1")).numa_load
    assert loads == {0: 0.0, 1: 0.5}  # (1.0 + 1.0 + 0 + 0) / 4
    # the next exclusive pod never gets the moved pod's CPUs: NUMA 1 has 2 left
    await m.agents.on_decision(m.decision("q", {1: 4}, decision_id="d3"))
    assert m.agents.held("n1", "t/q") == ()
    # a stale view of what the pod holds is refused, as the agent refuses it
    stale = await m.agents.on_action(action("set-cpuset", target_numa=0, cpu_count=3))
    assert stale.status == "refused" and "not 3" in stale.reason
    # a shared pod is pinned to the shared CPUs of its target NUMA node
    assert (await m.agents.on_action(action("set-cpuset", pod="t/s", target_numa=1))).status == "done"
    assert set(m.tree.pod_cpuset(m.uid("s"))) == {4, 5, 6, 7} - set(held)


async def test_the_usage_sample_reads_the_cpusets_the_agent_wrote():
    shared = spec("a", cpu=2000, usage=UsageSpec(cpu=Constant(level=0.5)))
    pinned = spec("b", cpu=4000, usage=UsageSpec(cpu=Constant(level=0.75)))
    m = Machines(shared, pinned, background={0: 0.1})
    await m.run("a")
    await m.run("b", decision_id="d2")
    assert await m.agents.pin("n1", "t/b", m.uid("b"), 1) == ""
    sample = sample_node(m.model, "n1", 0.0, T0, 10.0, shared_pool=m.agents.shared_pool("n1"))
    # a: 2000·0.5 = 1000 milli over the 8 shared CPUs = 0.125 each; b: 4000·0.75 = 3000 over CPUs 4–7 = 0.75 each
    assert sample.numa_load[0] == pytest.approx(0.1 + 0.125)
    assert sample.numa_load[1] == pytest.approx(0.125 + 0.75)
    usage = {u.pod: u for u in sample.pods}
    assert usage["t/b"].cpuset == [4, 5, 6, 7] and usage["t/a"].numa_nodes == [0, 1]
