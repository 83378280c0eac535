"""The node agent is the one authority over the node's CPU sets, on this
machine's real cgroups (v1, root) through a real NATS server: busy-looping
child processes in fresh pod cgroups (each with a container cgroup), and
the kernel's own `Cpus_allowed_list` as the judge. The machine's two CPUs
are declared two NUMA nodes (cpu0 = NUMA 0, cpu1 = NUMA 1). The test plays
placement and the bridge (decisions, bind results, pod events as the bridge
reports them) except in the move, where the real placement decides.

After each scenario `tidal node audit` reports 0 violations; a cpuset
corrupted by hand is reported, by the command and by the agent's gauge."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from builders import pod
from conftest import bus_options, make_bus, patience, start_service, wait_until
from test_topology_cgroup_real import CGROUP, Pod, allowed_cpus, busy_child, cleanup, make_dir
from tidal_bus import Bus, StartAt
from tidal_cli import main as cli
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_schemas import BindResult, NodeAction, PlacementDecision, PlacementDecisions
from tidal_schemas.fence import DecisionFence
from tidal_topology.cpuset import parse_cpuset
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

pytestmark = pytest.mark.cgroup
NODE = "node-under-test"
OVERRIDE = "0:0,1:1"


@pytest.fixture
def node_cgroups():
    """A fresh kubepods-like parent in the v1 cpuset hierarchy; `make()` adds
    a pod cgroup with one container cgroup holding a busy child, `remove(pod)`
    kills it and removes its cgroups, as kubelet does once a pod is deleted."""
    root_cpus = parse_cpuset((CGROUP / "cpuset/cpuset.cpus").read_text()) if (CGROUP / "cpuset").is_dir() else []
    if root_cpus[:2] != [0, 1]:
        pytest.skip(f"needs a cgroup v1 cpuset hierarchy with cpus 0 and 1 (has {root_cpus})")
    parent = f"tidal-test-{uuid.uuid4().hex[:10]}"
    base = CGROUP / "cpuset" / parent
    make_dir(base)
    for name in ("cpuset.cpus", "cpuset.mems"):  # a new v1 cpuset is empty until given cpus and mems
        (base / name).write_text((CGROUP / "cpuset" / name).read_text())
    made: list[Pod] = []

    def make() -> Pod:
        uid = str(uuid.uuid4())
        pod_dir = base / f"pod{uid}"
        dirs = [pod_dir, pod_dir / "ctr"]
        for directory in dirs:
            directory.mkdir()
            for name in ("cpuset.cpus", "cpuset.mems"):
                (directory / name).write_text((base / name).read_text())
        proc = busy_child()
        (pod_dir / "ctr" / "cgroup.procs").write_text(str(proc.pid))
        made.append(Pod(uid, parent, proc, dirs))
        return made[-1]

    def remove(p: Pod) -> None:
        made.remove(p)
        cleanup(p, [])

    try:
        yield parent, make, remove
    finally:
        for p in made:
            cleanup(p, [])
        base.rmdir()


def agent_settings(url, namespace, tmp_path, parent, **overrides) -> TopologySettings:
    values = dict(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1",
                  node_name=NODE, numa_override=OVERRIDE, interval_s=0.5, rescan_s=0.2, bind_timeout_s=patience(30),
                  state_file=str(tmp_path / "cpu-state.json"), cgroup_root=str(CGROUP), cgroup_parent=parent,
                  cgroup_version="v1", drain_timeout_s=2)
    values.update(overrides)
    return TopologySettings(**values)


async def own_bus(url: str, namespace: str, source: str) -> Bus:
    """A connection of the service's own, closed with a short drain timeout: a
    NATS group subscription sometimes fails to close (see test_cluster_path.Path.own_bus)."""
    bus = Bus.from_url(url, namespace=namespace, cluster="c1", source=source, connect_options={"drain_timeout": 2},
                       **bus_options(url))
    await bus.backend.connect()
    return bus


async def start_agent(settings):
    agent = TopologyService(settings, bus=await own_bus(settings.bus_url, settings.namespace, "topology"))
    return agent, await start_service(agent)


async def stop_own(service, task) -> None:
    """Stop a service started on its own connection, then close that. A
    service whose group subscription does not close (the bus issue above) is
    cancelled after 10 s, as test_cluster_path's teardown does: the tests
    here judge cgroups and events, not the bus's shutdown."""
    service.stop()
    with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(task, patience(10))
    await service.bus.backend.close()


def node_audit(settings: TopologySettings, capsys) -> tuple[int, dict]:
    """`tidal node audit --json` on the agent's books and cgroups."""
    capsys.readouterr()
    code = cli.main(["node", "audit", "--json", "--state-file", settings.state_file, "--cgroup-root",
                     settings.cgroup_root, "--cgroup-parent", settings.cgroup_parent, "--cgroup-version", "v1",
                     "--numa-override", OVERRIDE])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip().startswith("{") else {"output": out}


async def assert_clean(agent, settings, capsys) -> None:
    """The node audit finds nothing once the agent has finished the change it
    is making: a subtree is narrowed bottom-up, so a process shows its new
    CPUs before its pod's cgroup does (the agent audits after each change)."""
    async with agent.cpus.lock:
        code, report = node_audit(settings, capsys)
    assert code == 0 and report["violations"] == [], report


def decision(name: str, did: str, numa_cpus=None, numa_nodes=()) -> PlacementDecisions:
    """One decision, as placement publishes it: an event of a cycle's decisions."""
    return PlacementDecisions.of(PlacementDecision(
        decision_id=did, namespace="default", name=name, outcome="placed", node=NODE, numa_cpus=numa_cpus or {},
        numa_nodes=list(numa_nodes or (numa_cpus or {}))))


def running(name: str, p: Pod, did: str = "", numa_cpus=None, **fields):
    """The pod as the bridge reports it once bound and running here."""
    exclusive = bool(numa_cpus)
    return pod(name, phase="running", node=NODE, uid=p.uid, decision_id=did, numa_cpus=numa_cpus or {},
               exclusive_cpus=exclusive, cpu_milli=1000 * sum((numa_cpus or {}).values()) or 500, **fields)


def allowed(p: Pod) -> list[int]:
    return allowed_cpus(p.proc.pid)


async def pinned(p: Pod, cpus: list[int], what: str) -> None:
    await wait_until(lambda: allowed(p) == cpus, timeout=15, what=f"{what}: Cpus_allowed_list = {cpus}")


class Assignments:
    """Follows cpu.assignment once."""

    def __init__(self, bus) -> None:
        self.seen: list = []
        self.task = asyncio.create_task(self._follow(bus))

    async def _follow(self, bus) -> None:
        async for _, event in bus.read("cpu.assignment", StartAt.earliest(), follow=True):
            self.seen.append(event.payload)

    async def wait(self, pod_name: str, released: bool, timeout: float = 15):
        def found():
            return next((a for a in self.seen if a.pod == f"default/{pod_name}" and a.released == released), None)
        await wait_until(lambda: found() is not None, timeout=timeout,
                         what=f"{'release' if released else 'assignment'} of {pod_name} (seen {self.seen})")
        return found()

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def test_shared_pods_leave_the_exclusive_cpu_and_get_it_back(nats_server, namespace, tmp_path,
                                                                   node_cgroups, capsys):
    parent, make, remove = node_cgroups
    db, other = make(), make()
    settings = agent_settings(nats_server.url, namespace, tmp_path, parent)
    agent, task = await start_agent(settings)
    async with make_bus(nats_server.url, namespace) as bus:
        # a pod of another scheduler, and a Tidal pod given 1 exclusive CPU on NUMA 1
        await bus.publish(running("other", other, foreign=True))
        await bus.publish(decision("db", "d1", {1: 1}))
        await bus.publish(running("db", db, "d1", {1: 1}))
        await pinned(db, [1], "the exclusive pod")
        await pinned(other, [0], "the other scheduler's pod leaves the exclusive CPU")
        await assert_clean(agent, settings, capsys)

        await bus.publish(pod("db", phase="deleted", node=NODE, uid=db.uid))
        remove(db)
        await pinned(other, [0, 1], "the shared pool has cpu1 again")
        await assert_clean(agent, settings, capsys)
    await stop_own(agent, task)


async def test_a_failed_bind_and_a_bind_timeout_each_give_the_cpus_back(nats_server, namespace, tmp_path,
                                                                        node_cgroups, capsys):
    parent, make, remove = node_cgroups
    second, fourth, shared = make(), make(), make()
    settings = agent_settings(nats_server.url, namespace, tmp_path, parent, bind_timeout_s=1.5)
    agent, task = await start_agent(settings)
    async with make_bus(nats_server.url, namespace) as bus:
        seen = Assignments(bus)
        await bus.publish(running("shared", shared, foreign=True))
        # the bind of "first" fails: cpu1 comes back, and the next exclusive pod gets it
        await bus.publish(decision("first", "d1", {1: 1}))
        assert (await seen.wait("first", released=False)).cpuset == [1]
        await bus.publish(BindResult(decision_id="d1", namespace="default", name="first", node=NODE, ok=False,
                                     reason="conflict"))
        assert "bind failed: conflict" in (await seen.wait("first", released=True)).reason
        await bus.publish(decision("second", "d2", {1: 1}))
        await bus.publish(running("second", second, "d2", {1: 1}))
        assert (await seen.wait("second", released=False)).cpuset == [1]
        await pinned(second, [1], "the next exclusive pod")
        await pinned(shared, [0], "the shared pod off the exclusive CPU")
        await assert_clean(agent, settings, capsys)

        # "second" ends; "third" is never bound: after the bind timeout its cpu1 comes back
        await bus.publish(pod("second", phase="deleted", node=NODE, uid=second.uid))
        remove(second)
        await seen.wait("second", released=True)
        await bus.publish(decision("third", "d3", {1: 1}))
        assert (await seen.wait("third", released=False)).cpuset == [1]
        assert "no bind within 1.5s" in (await seen.wait("third", released=True, timeout=10)).reason
        await bus.publish(decision("fourth", "d4", {1: 1}))
        await bus.publish(running("fourth", fourth, "d4", {1: 1}))
        await pinned(fourth, [1], "the exclusive pod after the timeout")
        await pinned(shared, [0], "the shared pod off the exclusive CPU")
        await assert_clean(agent, settings, capsys)
        await seen.close()
    await stop_own(agent, task)


async def start_placement(url: str, namespace: str):
    """The real placement service, on a connection of its own."""
    placement = PlacementService(PlacementSettings(bus_url=url, namespace=namespace, cluster="c1", http_port=0,
                                                   http_host="127.0.0.1", gpu_strategy="best-fit",
                                                   bind_timeout_s=patience(30), takeover_settle_s=1.5, drain_timeout_s=2),
                                 bus=await own_bus(url, namespace, "placement"))
    return placement, await start_service(placement)


async def _placed(bus, name: str) -> PlacementDecision:
    """The admitted `placed` decision for `name`, by the fence rule every reader uses."""
    async def find():
        while True:
            fence = DecisionFence()
            async for _, event in bus.read("placement.decision", StartAt.earliest()):
                for d in event.payload.items:
                    if fence.admit(d) and d.outcome == "placed" and d.name == name:
                        return d
            await asyncio.sleep(0.1)
    return await asyncio.wait_for(find(), patience(20))


async def test_a_move_keeps_the_books_placement_and_later_events_true(nats_server, namespace, tmp_path,
                                                                      node_cgroups, capsys):
    parent, make, remove = node_cgroups
    a, b = make(), make()
    settings = agent_settings(nats_server.url, namespace, tmp_path, parent)
    agent, agent_task = await start_agent(settings)
    placement, placement_task = await start_placement(nats_server.url, namespace)
    await wait_until(lambda: NODE in placement.clusters["c1"].state.rows if "c1" in placement.clusters else False,
                     timeout=20, what="placement knows the node")

    def numa_free() -> dict[int, int]:
        return placement.clusters["c1"].state.free_by_node()[NODE]["numa_cpus"]

    async with make_bus(nats_server.url, namespace) as bus:
        async def place(name: str, p: Pod) -> PlacementDecision:
            await bus.publish(pod(name, cpu_milli=1000, exclusive_cpus=True, qos="LS", uid=p.uid))
            d = await _placed(bus, name)
            await bus.publish(BindResult(decision_id=d.decision_id, namespace="default", name=name, node=NODE,
                                         ok=True))
            await bus.publish(running(name, p, d.decision_id, d.numa_cpus, qos="LS"))
            return d

        # the real placement puts the LS pod on one NUMA node; the agent gives it that NUMA node's CPU
        first = await place("a", a)
        [source] = first.numa_cpus
        target = 1 - source
        await pinned(a, [source], "the LS pod on the NUMA node placement chose")

        # remediation's move: a target NUMA node and a CPU count, never concrete CPUs
        await bus.publish(NodeAction(action_id="m1", node=NODE, kind="set-cpuset", pod="default/a",
                                     target_numa=target, cpu_count=1, reason="test: NUMA hotspot"))
        async for _, event in bus.read("action.result", StartAt.earliest(), follow=True):
            if event.payload.action_id == "m1":
                assert event.payload.status == "done", event.payload.reason
                break
        await pinned(a, [target], "the moved pod")
        # placement follows the move: the pod's CPU is counted on its new NUMA node
        await wait_until(lambda: numa_free() == {source: 1, target: 0}, timeout=15,
                         what=f"placement to count the moved CPU on NUMA {target} (has {numa_free()})")

        # a later running event of the moved pod, as the bridge reports it again, does not undo the move
        again = datetime(2026, 6, 1, tzinfo=timezone.utc)
        await bus.publish(running("a", a, first.decision_id, first.numa_cpus, qos="LS", started_at=again))
        await wait_until(lambda: agent.pods.get("default/a").started_at == again, what="the agent read it")
        await asyncio.sleep(0.5)  # the agent would re-pin within its rescan period
        assert allowed(a) == [target] and agent.cpu_state.held_by("default/a") == {target}

        # the next exclusive pod gets the CPU the moved pod left, never the one it holds now
        second = await place("b", b)
        assert second.numa_cpus == {source: 1}
        await pinned(b, [source], "the next exclusive pod")
        assert allowed(a) == [target]
        await assert_clean(agent, settings, capsys)
    await stop_own(placement, placement_task)
    await stop_own(agent, agent_task)


async def test_a_shared_pod_placed_on_one_numa_node_runs_only_on_its_shared_cpus(nats_server, namespace, tmp_path,
                                                                                 node_cgroups, capsys):
    parent, make, remove = node_cgroups
    web, other, db = make(), make(), make()
    settings = agent_settings(nats_server.url, namespace, tmp_path, parent)
    agent, task = await start_agent(settings)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(running("other", other, foreign=True))
        await bus.publish(decision("web", "d1", numa_nodes=[1]))  # no exclusive CPUs: NUMA 1's shared ones
        await bus.publish(running("web", web, "d1"))
        await pinned(web, [1], "the shared pod on NUMA 1")
        await pinned(other, [0, 1], "a pod placed on no NUMA node: the whole shared pool")
        await pinned(db, [0, 1], "a pod the agent has no event of yet: the whole shared pool")
        await assert_clean(agent, settings, capsys)

        # NUMA 1's only CPU becomes exclusive: web falls back to the whole shared pool
        await bus.publish(decision("db", "d2", {1: 1}))
        await bus.publish(running("db", db, "d2", {1: 1}))
        await pinned(db, [1], "the exclusive pod")
        await pinned(web, [0], "the shared pod, NUMA 1 having no shared CPU left")
        await pinned(other, [0], "the other pod")
        await assert_clean(agent, settings, capsys)
    await stop_own(agent, task)


async def test_a_cpuset_corrupted_by_hand_is_reported_by_the_command_and_the_gauge(nats_server, namespace, tmp_path,
                                                                                   node_cgroups, capsys):
    parent, make, remove = node_cgroups
    db, other = make(), make()
    settings = agent_settings(nats_server.url, namespace, tmp_path, parent, audit_interval_s=0.3)
    agent, task = await start_agent(settings)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(running("other", other, foreign=True))
        await bus.publish(decision("db", "d1", {1: 1}))
        await bus.publish(running("db", db, "d1", {1: 1}))
        await pinned(db, [1], "the exclusive pod")
        await pinned(other, [0], "the shared pod")
        await assert_clean(agent, settings, capsys)

        # someone widens the shared pod's cgroup onto the exclusive CPU
        (CGROUP / "cpuset" / parent / f"pod{other.uid}" / "cpuset.cpus").write_text("0-1")
        code, report = node_audit(settings, capsys)
        assert code == 1
        assert report["counts"] == {"double-booked": 0, "leaked": 1, "orphaned": 0, "drifted": 1}
        leaked = next(v for v in report["violations"] if v["kind"] == "leaked")
        # the command knows the pods its books name; a pod of another scheduler by its uid
        assert leaked["pod"] == f"uid {other.uid}" and "cpus 1 held by default/db" in leaked["detail"]

        def metrics() -> str:  # from a thread: the agent serves /metrics on this event loop
            return urllib.request.urlopen(f"http://127.0.0.1:{agent.http.port}/metrics", timeout=patience(5)).read().decode()

        def gauge(text: str, kind: str) -> float | None:
            for line in text.splitlines():
                if line.startswith("tidal_node_audit_violations{") and f'kind="{kind}"' in line:
                    return float(line.rsplit(" ", 1)[1])
            return None

        for _ in range(100):  # the agent audits every audit_interval_s = 0.3s
            text = await asyncio.to_thread(metrics)
            if gauge(text, "leaked") == 1.0:
                break
            await asyncio.sleep(0.1)
        assert gauge(text, "leaked") == 1.0 and gauge(text, "double-booked") == 0.0, text
    await stop_own(agent, task)
    assert Path(settings.state_file).exists()
