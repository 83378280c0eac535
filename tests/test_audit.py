"""The auditor, one invariant at a time: a recorded stream that violates it
(the violation named, with the events that prove it) and one that does not;
then `tidal audit` on a recording (exit 1 and one line per violation)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from tidal_audit.registry import CHECKS, audit
from tidal_schemas import (
    ActionResult, BindResult, CpuAssignment, GpuAsk, GpuShare, NodeAction, NodeAllocatable, NodeAllocatables, NodeMetrics,
    PlacementDecision, PlacementDecisions, PodLifecycle, PodUsage, Resources, TenantConfig, make_envelope,
)
from tidal_schemas.fence import fence_decision
from tidal_simulator.topology_builder import make_topology

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NODE = make_topology("n1", (4, 4), gpus=2, memory_mib=16384)  # 8 CPUs, NUMA 0 and 1 of 4, gpu0 + gpu1


# -- builders ---------------------------------------------------------------------
def pod(name: str, phase: str = "running", *, node: str | None = "n1", cpu: int = 1000, mem: int = 1024,
        numa: dict[int, int] | None = None, gpus=(), gpu_count: int = 0, tenant: str = "t", decision: str = "",
        **fields) -> PodLifecycle:
    return PodLifecycle(namespace="t", name=name, uid=f"uid-{name}", phase=phase,
                        node=node if phase in ("bound", "running", "deleted") else None,
                        requests=Resources(cpu_milli=cpu, memory_mib=mem), exclusive_cpus=bool(numa),
                        numa_cpus=numa or {}, gpus=[GpuShare(gpu=g, milli=m, model="A100") for g, m in gpus],
                        gpu=GpuAsk(count=gpu_count or len(gpus), milli=gpus[0][1] if gpus else 1000), tenant=tenant,
                        decision_id=decision, created_at=T0, **fields)


def placed(name: str, decision: str, node: str = "n1", epoch: int = 0, leader: str = "") -> PlacementDecision:
    return PlacementDecision(decision_id=decision, namespace="t", name=name, uid=f"uid-{name}", outcome="placed",
                             node=node, epoch=epoch, leader=leader)


def bound(name: str, decision: str, ok: bool = True) -> BindResult:
    return BindResult(decision_id=decision, namespace="t", name=name, node="n1", ok=ok,
                      reason="" if ok else "binding refused")


def action(kind: str, name: str, action_id: str, by: str = "oversell") -> NodeAction:
    return NodeAction(action_id=action_id, node="n1", kind=kind, pod=f"t/{name}", reason="test", requested_by=by,
                      cpuset=[0] if kind == "set-cpuset" else [])


def usage(*pods: tuple[str, str, int]) -> NodeMetrics:
    """A sample of n1 naming (pod, qos, memory used)."""
    return NodeMetrics(node="n1", sampled_at=T0, interval_s=10, pods=[
        PodUsage(pod=f"t/{n}", uid=f"uid-{n}", cpu_milli=100, memory_mib=m, qos=q, cpuset=[0]) for n, q, m in pods])


def violations(*payloads) -> list[str]:
    """The audit's lines for events of `payloads`, a decision alone as an event of one."""
    events = [PlacementDecisions.of(p) if isinstance(p, PlacementDecision) else p for p in payloads]
    return [v.line() for v in audit([make_envelope(p, cluster="c1", source="test") for p in events], cluster="c1")]


def only(name: str, lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(name + ":")]


# -- the table: one violating stream and one clean stream per invariant ---------
CASES = {
    "placed-twice": (
        # a second decision of the same fence places a pod still placed
        [fence_decision(1, "a"), placed("p", "d1", epoch=1, leader="a"), placed("p", "d2", epoch=1, leader="a")],
        # a failed bind ends the first placement; a new leader's fence is another fence; a redelivery is the same
        [fence_decision(1, "a"), placed("p", "d1", epoch=1, leader="a"), placed("p", "d1", epoch=1, leader="a"),
         bound("p", "d1", ok=False), placed("p", "d2", epoch=1, leader="a"),
         fence_decision(2, "b"), placed("p", "d3", epoch=2, leader="b"),
         placed("q", "d4", epoch=1, leader="a")],  # a deposed leader's decision does not count
    ),
    "over-allocated": (
        # 5 + 4 CPUs on an 8-CPU node (one pod foreign), and gpu0 given 600 + 500 milli
        [NODE, pod("a", cpu=5000, foreign=True), pod("b", cpu=4000),
         pod("c", cpu=0, gpus=[("gpu0", 600)]), pod("d", cpu=0, gpus=[("gpu0", 500)])],
        # the same once oversell advertised 12 CPUs, and a GPU share that fits; a pending pod holds nothing
        [NODE, NodeAllocatables.of(NodeAllocatable(node="n1", policy="factor", capacity=NODE.capacity,
                                                   allocatable=Resources(cpu_milli=12000, memory_mib=16384))),
         pod("a", cpu=5000, foreign=True), pod("b", cpu=4000), pod("c", cpu=0, gpus=[("gpu0", 600)]),
         pod("d", cpu=0, gpus=[("gpu0", 400)]), pod("e", "pending", cpu=9000)],
    ),
    "over-allocated/numa": (
        # NUMA 1 has 4 allocatable CPUs: 3 + 2 exclusive
        [NODE, pod("a", cpu=3000, numa={1: 3}), pod("b", cpu=2000, numa={1: 2})],
        [NODE, pod("a", cpu=3000, numa={1: 3}), pod("b", cpu=2000, numa={0: 2}),
         pod("a", "deleted", cpu=3000, numa={1: 3}), pod("c", cpu=4000, numa={1: 4})],
    ),
    "over-allocated/floating": (
        # a foreign pod's 2 whole GPUs nobody can name, and a Tidal share: 2 GPUs, 2500 milli
        [NODE, pod("ds", cpu=0, gpu_count=2, foreign=True), pod("p", cpu=0, gpus=[("gpu1", 500)])],
        [NODE, pod("ds", cpu=0, gpu_count=1, foreign=True), pod("p", cpu=0, gpus=[("gpu1", 500)])],
    ),
    "cpu-in-two-sets": (
        [CpuAssignment(node="n1", pod="t/a", cpuset=[1, 2]), CpuAssignment(node="n1", pod="t/b", cpuset=[2, 3])],
        # released first; a re-assignment of the same pod replaces its set; another node is another CPU
        [CpuAssignment(node="n1", pod="t/a", cpuset=[1, 2]), CpuAssignment(node="n1", pod="t/a", cpuset=[5, 6]),
         CpuAssignment(node="n1", pod="t/b", cpuset=[1, 2]),
         CpuAssignment(node="n1", pod="t/b", cpuset=[1, 2], released=True),
         CpuAssignment(node="n1", pod="t/c", cpuset=[2]), CpuAssignment(node="n2", pod="t/d", cpuset=[2])],
    ),
    "over-quota": (
        # A100 quota 1000 milli: 600 + 500
        [NODE, TenantConfig(tenant="t", quota={"A100": 1000}), pod("a", cpu=0, gpus=[("gpu0", 600)]),
         pod("b", cpu=0, gpus=[("gpu1", 500)])],
        # another tenant's pods and foreign pods are not charged; a deleted pod gives its share back
        [NODE, TenantConfig(tenant="t", quota={"A100": 1000, "cpu": 2000}), pod("a", cpu=1000, gpus=[("gpu0", 600)]),
         pod("x", cpu=0, gpus=[("gpu1", 500)], tenant="u"), pod("ds", cpu=4000, foreign=True),
         pod("a", "deleted", cpu=1000, gpus=[("gpu0", 600)]), pod("b", cpu=1000, gpus=[("gpu0", 1000)])],
    ),
    "ineligible-action": (
        # evicting a non-evictable pod while an evictable one is left; freezing an LS pod; evicting twice
        [pod("keep", evictable=False, priority=0), pod("spare", evictable=True), usage(("keep", "BE", 500),
                                                                                     ("spare", "BE", 500)),
         action("evict", "keep", "e1"), pod("ls", qos="LS"), action("freeze", "ls", "f1", by="remediation"),
         action("evict", "keep", "e2")],
        # the evictable one first, then the lowest priority; a BE freeze; a refused eviction asked again
        [pod("hi", priority=10), pod("lo", priority=1), pod("spare", evictable=True), pod("be", qos="BE"),
         usage(("hi", "BE", 500), ("lo", "BE", 500), ("spare", "BE", 500), ("be", "BE", 0)),
         action("evict", "spare", "e1"), pod("spare", "deleted", evictable=True),
         action("evict", "lo", "e2"), ActionResult(action_id="e2", node="n1", kind="evict", pod="t/lo",
                                                   status="refused", reason="PDB"),
         action("evict", "lo", "e3"), action("freeze", "be", "f1", by="remediation")],
    ),
    "ineligible-action/moves": (
        # a move asked again while the first is unanswered
        [pod("ls", qos="LS"), usage(("ls", "LS", 100)), action("set-cpuset", "ls", "m1", by="remediation"),
         action("set-cpuset", "ls", "m2", by="remediation")],
        # a move carried out, then another one (its target got hot in turn): each decided once
        [pod("ls", qos="LS"), usage(("ls", "LS", 100)), action("set-cpuset", "ls", "m1", by="remediation"),
         ActionResult(action_id="m1", node="n1", kind="set-cpuset", pod="t/ls", status="done", reason="moved"),
         action("set-cpuset", "ls", "m2", by="remediation")],
    ),
    "ineligible-action/resent": (
        # a second freeze while the first is unanswered
        [pod("be", qos="BE"), usage(("be", "BE", 100)), action("freeze", "be", "f1", by="remediation"),
         action("freeze", "be", "f2", by="remediation")],
        # the first answered unknown-pod, then a copy of it stored after the answer (a re-send that crossed
        # it, or a publish retried across a failover): the same decision, so the next freeze is the second
        [pod("be", qos="BE"), usage(("be", "BE", 100)), action("freeze", "be", "f1", by="remediation"),
         ActionResult(action_id="f1", node="n1", kind="freeze", pod="t/be", status="unknown-pod",
                      reason="not known here yet"),
         action("freeze", "be", "f1", by="remediation"), action("freeze", "be", "f2", by="remediation")],
    ),
    "ineligible-action/lagging": (
        # a move of a pod no sample and no pod event ever put on the node
        [usage(("ls", "LS", 100)), action("set-cpuset", "gone", "m1", by="remediation")],
        # decided on the sample of T0, stored after the pod ended and a later sample left it out: the
        # stage decided on what it was shown (its stream lagged), so the pod counts as there
        [pod("ls", qos="LS"), usage(("ls", "LS", 100)), pod("ls", "deleted", qos="LS"),
         usage().model_copy(update={"sampled_at": T0 + timedelta(seconds=10)}),
         action("set-cpuset", "ls", "m1", by="remediation").model_copy(
             update={"measured": {"at": T0.timestamp()}})],
    ),
    "bind-not-rolled-back": (
        [placed("p", "d1"), bound("p", "d1", ok=False), pod("p", "bound", decision="d1")],
        [placed("p", "d1"), bound("p", "d1", ok=False), placed("p", "d2"), pod("p", "bound", decision="d2")],
    ),
    "decision-id-reused": (
        # the pod made again under its name (a new uid) placed by the first pod's decision id
        [placed("p", "d1"), pod("p", "deleted", decision="d1"),
         placed("p", "d1").model_copy(update={"uid": "uid-p-again"})],
        # a redelivery names the same pod; the pod made again gets an id of its own
        [placed("p", "d1"), placed("p", "d1"), pod("p", "deleted", decision="d1"),
         placed("p", "d2").model_copy(update={"uid": "uid-p-again"})],
    ),
    "decision-id-reused/other-pod": (
        [placed("p", "d1"), placed("q", "d1")],
        [placed("p", "d1"), placed("q", "d2")],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_invariant_is_caught_when_violated_and_quiet_when_kept(case):
    name = case.split("/")[0]
    bad, good = CASES[case]
    caught = only(name, violations(*bad))
    assert caught, f"{case}: the violating stream was not caught"
    assert all(line.endswith("]") and " [" in line for line in caught)  # each cites its events
    assert violations(*good) == [], f"{case}: the clean stream was flagged"


def test_every_check_has_its_cases():
    assert {case.split("/")[0] for case in CASES} == set(CHECKS)


def test_a_violation_names_the_events_that_prove_it():
    lines = violations(fence_decision(1, "a"), placed("p", "d1", epoch=1, leader="a"),
                       placed("p", "d2", epoch=1, leader="a"))
    assert len(lines) == 1
    assert "pod t/p placed on n1 while still placed on n1 under the same fence (epoch 1, leader a)" in lines[0]
    assert lines[0].count("placement.decision ") == 2


def test_decisions_of_one_event_are_audited_each_in_log_order():
    lines = violations(PlacementDecisions.of(fence_decision(1, "a"), placed("p", "d1", epoch=1, leader="a"),
                                             placed("p", "d2", epoch=1, leader="a")))
    assert len(lines) == 1 and "pod t/p placed on n1 while still placed on n1" in lines[0]
    # the fence of the same event counts for the decisions after it, not before
    assert violations(PlacementDecisions.of(placed("p", "d1", epoch=1, leader="a"), fence_decision(1, "a"),
                                            placed("p", "d2", epoch=1, leader="a"))) == []


def test_other_clusters_are_not_audited():
    other = [make_envelope(p, cluster="c2", source="test")
             for p in (NODE, pod("a", cpu=9000))]
    assert audit(other, cluster="c1") == [] and len(audit(other)) == 1


# -- the command ---------------------------------------------------------------------
async def test_tidal_audit_prints_each_violation_and_exits_1(nats_server, namespace, capsys):
    from conftest import make_bus
    from tidal_cli import main as cli

    bad, _ = CASES["over-allocated/numa"]
    async with make_bus(nats_server.url, namespace, cluster="c1") as bus:
        await bus.ensure_streams()
        for payload in bad:
            await bus.publish(payload)
    argv = ["audit", "--bus", nats_server.url, "--namespace", namespace, "--cluster", "c1"]
    assert await asyncio.to_thread(cli.main, argv) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "invariant violations: 1"
    assert out[0].startswith("over-allocated: node n1: NUMA 1: 5 exclusive CPUs held > 4 allocatable")
    # the same streams read as another cluster's: nothing of theirs is audited
    assert await asyncio.to_thread(cli.main, [*argv[:-1], "c2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["invariant violations: 0"]
