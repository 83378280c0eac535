"""An exclusive pod's container is pinned as soon as its cgroup appears, not
at the agent's next scan: the real agent over a real NATS server on this
machine's cgroup v1 cpusets, with its periodic scan set far beyond the
test's bound (10 minutes), so only the cgroup watch can pin in time.

The pod's decision and its Running event come first; then the test makes
the pod and container cgroups as kubelet and the runtime do (the parent's
CPUs copied in), and the container must read cpu 1 alone."""

from __future__ import annotations

import uuid

from conftest import make_bus, wait_until
from test_topology_authority_real import NODE, agent_settings, decision, node_cgroups, running  # noqa: F401
from test_topology_authority_real import start_agent, stop_own
from test_topology_cgroup_real import CGROUP, Pod
from tidal_topology.cpuset import parse_cpuset

NEVER_S = 600.0  # the periodic scan: it would not come before the bound below
BOUND_S = 120.0  # a hang guard, generous for a slow machine; the watch takes milliseconds here


def make_pod_cgroups(parent: str, uid: str) -> tuple[Pod, object]:
    """The pod and container cgroups, each with the parent's CPUs and memory nodes."""
    base = CGROUP / "cpuset" / parent
    pod_dir = base / f"pod{uid}"
    container = pod_dir / "ctr"
    for directory in (pod_dir, container):
        directory.mkdir()
        for name in ("cpuset.cpus", "cpuset.mems"):
            (directory / name).write_text((base / name).read_text())
    return Pod(uid, parent, None, [pod_dir, container]), container


async def test_a_new_container_is_pinned_before_any_scan(nats_server, namespace, tmp_path, node_cgroups):
    parent, _make, _remove = node_cgroups
    settings = agent_settings(nats_server.url, namespace, tmp_path, parent, rescan_s=NEVER_S)
    agent, task = await start_agent(settings)
    made = None
    try:
        async with make_bus(nats_server.url, namespace) as bus:
            uid = str(uuid.uuid4())
            await bus.publish(decision("db", "d1", {1: 1}))
            await bus.publish(running("db", Pod(uid, parent, None, []), "d1", {1: 1}))
            await wait_until(lambda: getattr(agent.cpus.state.claims.get("default/db"), "stage", "") == "running",
                             timeout=BOUND_S, what="the agent's claim of cpu 1 for db, read as running")
            await wait_until(lambda: agent.cpus.live, timeout=BOUND_S, what="the agent to go live")
            # kubelet makes the cgroups only now: the agent has nothing to pin until they appear
            made, container = make_pod_cgroups(parent, uid)
            await wait_until(lambda: parse_cpuset((container / "cpuset.cpus").read_text()) == [1],
                             timeout=BOUND_S, what="the new container pinned to cpu 1 without a scan")
    finally:
        await stop_own(agent, task)
        for directory in reversed(made.dirs if made else []):
            directory.rmdir()
