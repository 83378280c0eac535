"""The node agent over a real NATS server: it publishes valid topology and
metrics from this machine, gives a placed pod its exclusive CPUs (kept in a
checkpoint), and freezes, thaws and moves a real busy process through its
cgroups when actions arrive."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from builders import pod
from conftest import make_bus, patience, start_service, stop_service, wait_until, wait_until_async
from test_topology_cgroup_real import CGROUP, allowed_cpus, cpu_ticks, stays_flat, v1_pod  # noqa: F401
from tidal_bus import StartAt
from tidal_schemas import NodeAction, PlacementDecision, PlacementDecisions
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings


def _settings(url, namespace, tmp_path, **overrides) -> TopologySettings:
    values = dict(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1",
                  node_name="node-under-test", numa_override="0:0,1:1", interval_s=0.3,
                  state_file=str(tmp_path / "cpu-state.json"), cgroup_parent="tidal-none")
    values.update(overrides)
    return TopologySettings(**values)


async def _start(settings):
    service = TopologyService(settings)
    return service, await start_service(service)


_stop = stop_service


async def _first(bus, stream, predicate, timeout=10.0):
    async def find():
        async for _, event in bus.read(stream, StartAt.earliest(), follow=True):
            if predicate(event):
                return event
    return await asyncio.wait_for(find(), patience(timeout))


async def test_publishes_this_machines_topology_and_usage(nats_server, namespace, tmp_path):
    service, task = await _start(_settings(nats_server.url, namespace, tmp_path, reserved_cpus="0"))
    async with make_bus(nats_server.url, namespace) as bus:
        topology = (await _first(bus, "node.topology", lambda e: True)).payload
        metrics = (await _first(bus, "node.metrics", lambda e: True)).payload
    await _stop(service, task)
    assert topology.node == "node-under-test" and [n.id for n in topology.numa_nodes] == [0, 1]
    assert [n.allocatable_cpus for n in topology.numa_nodes] == [0, 1]  # cpu0 reserved on NUMA 0
    assert topology.allocatable.cpu_milli == topology.capacity.cpu_milli - 1000
    assert set(metrics.cpu_util) == {c.cpu for c in topology.cpus}
    assert set(metrics.numa_load) == {0, 1} and metrics.memory_total_mib > 0


async def test_exclusive_cpus_assigned_checkpointed_and_released(nats_server, namespace, tmp_path):
    settings = _settings(nats_server.url, namespace, tmp_path)
    service, task = await _start(settings)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(PlacementDecisions.of(PlacementDecision(
            decision_id="d1", namespace="ns", name="db", outcome="placed", node="node-under-test", numa_cpus={1: 1})))
        assigned = (await _first(bus, "cpu.assignment", lambda e: not e.payload.released)).payload
        assert (assigned.pod, assigned.cpuset) == ("ns/db", [1])
        await _stop(service, task)

        # restart: the checkpoint keeps the assignment; a second decision cannot take CPU 1
        service, task = await _start(settings)
        assert service.cpu_state.held_by("ns/db") == {1}
        await bus.publish(pod("db", namespace="ns", phase="running", node="node-under-test", uid=str(uuid.uuid4())))
        await bus.publish(pod("db", namespace="ns", phase="deleted", node="node-under-test"))
        released = (await _first(bus, "cpu.assignment", lambda e: e.payload.released)).payload
        assert released.cpuset == [1]
        await wait_until(lambda: not service.cpu_state.held_by("ns/db"), what="release")
    await _stop(service, task)


async def test_a_cycles_decisions_for_this_node_each_publish_their_cpuset(nats_server, namespace, tmp_path):
    # one event, two pods on this node: two cpu.assignment events of one cause and one key (the node),
    # each with its own id, or the broker would keep only the first
    service, task = await _start(_settings(nats_server.url, namespace, tmp_path))
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(PlacementDecisions.of(*(PlacementDecision(
            decision_id=f"d-{name}", namespace="ns", name=name, outcome="placed", node="node-under-test",
            numa_cpus={numa: 1}) for numa, name in enumerate(("db", "web")))))
        await wait_until(lambda: service.cpu_state.held_by("ns/web") == {1}, what="both assignments")
        assigned: list = []

        async def both_stored() -> bool:  # held in the agent's books comes before its event is stored
            assigned[:] = [e async for _, e in bus.read("cpu.assignment", StartAt.earliest())]
            return len(assigned) >= 2

        await wait_until_async(both_stored, 10, "both assignments on cpu.assignment")
    await _stop(service, task)
    assert [(e.payload.pod, e.payload.cpuset) for e in assigned] == [("ns/db", [0]), ("ns/web", [1])]
    assert len({e.id for e in assigned}) == 2 and {e.causation_id for e in assigned} == {assigned[0].causation_id}


async def test_corrupt_checkpoint_is_reported_and_rebuilt_from_the_stream(nats_server, namespace, tmp_path, caplog):
    settings = _settings(nats_server.url, namespace, tmp_path)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(PlacementDecisions.of(PlacementDecision(
            decision_id="d1", namespace="ns", name="db", outcome="placed", node="node-under-test", numa_cpus={0: 1})))
        service, task = await _start(settings)
        await wait_until(lambda: service.cpu_state.held_by("ns/db") == {0}, what="assignment")
        await _stop(service, task)
    (tmp_path / "cpu-state.json").write_text('{"garbage": true}')
    service, task = await _start(settings)
    await wait_until(lambda: service.cpu_state.held_by("ns/db") == {0}, what="assignment rebuilt by replay")
    await _stop(service, task)
    assert any("corrupt" in r.getMessage() for r in caplog.records)


async def test_actions_for_unknown_or_foreign_pods_are_answered_not_executed(nats_server, namespace, tmp_path):
    service, task = await _start(_settings(nats_server.url, namespace, tmp_path))
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(pod("elsewhere", phase="running", node="other-node", uid=str(uuid.uuid4())))
        await wait_until(lambda: service.pods.get("default/elsewhere") is not None, what="pod known")
        for action_id, target, kind in (("a1", "default/ghost", "freeze"), ("a2", "default/elsewhere", "thaw"),
                                        ("a3", "../../etc", "freeze")):
            await bus.publish(NodeAction(action_id=action_id, node="node-under-test", kind=kind, pod=target,
                                         reason="test"))
        results = {}
        for action_id in ("a1", "a2", "a3"):
            event = await _first(bus, "action.result", lambda e, i=action_id: e.payload.action_id == i)
            results[action_id] = event.payload.status
    await _stop(service, task)
    assert results == {"a1": "unknown-pod", "a2": "refused", "a3": "unknown-pod"}


@pytest.fixture
def accounted_pod(v1_pod):
    """The busy pod also in cpuacct and memory cgroups, so the agent measures it."""
    made = []
    try:
        for controller in ("cpuacct", "memory"):
            directory = CGROUP / controller / v1_pod.parent / f"pod{v1_pod.uid}"
            directory.mkdir(parents=True)
            made.append(directory)
            (directory / "cgroup.procs").write_text(str(v1_pod.proc.pid))
        yield v1_pod
    finally:
        for directory in reversed(made):  # hand the process back to the root, then remove
            controller_root = directory.parent.parent
            (controller_root / "cgroup.procs").write_text(str(v1_pod.proc.pid))
            directory.rmdir()
            directory.parent.rmdir()


@pytest.mark.cgroup
async def test_freeze_thaw_and_move_a_real_process_through_the_agent(nats_server, namespace, tmp_path,
                                                                      accounted_pod):
    v1_pod = accounted_pod
    settings = _settings(nats_server.url, namespace, tmp_path, cgroup_root=str(CGROUP),
                         cgroup_parent=v1_pod.parent, cgroup_version="v1")
    service, task = await _start(settings)
    pid = v1_pod.proc.pid
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(pod("busy", phase="running", node="node-under-test", uid=v1_pod.uid, qos="BE"))
        await wait_until(lambda: service.pods.get("default/busy") is not None, what="agent knows the pod")

        async def act(action_id: str, kind: str, **fields) -> str:
            await bus.publish(NodeAction(action_id=action_id, node="node-under-test", kind=kind,
                                         pod="default/busy", reason="test", **fields))
            event = await _first(bus, "action.result", lambda e: e.payload.action_id == action_id, timeout=15)
            return event.payload.status

        assert await act("f1", "freeze") == "done"
        start, highest = await asyncio.to_thread(stays_flat, pid, 0.5)
        assert highest == start, "a frozen process must not get CPU time"
        usage = await _first(bus, "node.metrics", lambda e: any(p.pod == "default/busy" and p.frozen
                                                                 for p in e.payload.pods), timeout=10)
        assert usage is not None

        assert await act("t1", "thaw") == "done"
        thawed = cpu_ticks(pid)
        await wait_until(lambda: cpu_ticks(pid) > thawed, what="CPU time grows again")

        assert await act("m1", "set-cpuset", target_numa=1) == "done"
        await wait_until(lambda: allowed_cpus(pid) == [1], what="Cpus_allowed_list = 1")
    await _stop(service, task)


async def test_usage_sampling_reads_the_pod_table_on_the_event_loop_only(tmp_path):
    """The samples are built in a worker thread; the pod table, which pod events
    change on the event loop, must be read before. Read in the thread, a pod
    event applied meanwhile stopped the agent (`bench/cluster_pods.py` at
    150,000 pods: "dictionary changed size during iteration")."""
    import threading

    service = TopologyService(_settings("nats://127.0.0.1:1", "unused", tmp_path, interval_s=0.01))
    service.pods.apply(pod("a", namespace="ns", phase="running", node="node-under-test", uid=str(uuid.uuid4())))
    readers, table_read = [], service.pods.by_uid

    def by_uid():
        readers.append(threading.current_thread())
        return table_read()

    published = []

    async def publish(metrics, **_):
        published.append(metrics)
        if len(published) == 2:
            raise asyncio.CancelledError

    service.pods.by_uid, service.publish = by_uid, publish
    with pytest.raises(asyncio.CancelledError):
        await service.sample_usage()
    assert readers and set(readers) == {threading.main_thread()}
    assert all(m.node == "node-under-test" for m in published)
