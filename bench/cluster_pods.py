"""Memory of every service that follows the pod events, in a cluster of
many running pods.

Placement, scoring and oversell follow the cluster's `pod.lifecycle`
stream, and so does every node agent (its books must hear of a pod it
claimed being bound elsewhere or deleted): what each keeps of a running
pod is paid per pod of the cluster, by the agent on every node, within
the DaemonSet's memory limit (256 MiB, k8s/base/topology.yaml). The
placement benches publish pending pods that nothing binds, so they do not
show it.

The bench publishes `--nodes` node inventories and `--pods` running pods
spread over them, as the bridge reports them, then starts placement,
scoring, oversell and remediation (each its own process) and a real node
agent for the first node (`tidal run topology`, on an empty cgroup tree:
no pod cgroup is touched). Once the agent's pod table has caught up and
every process has stopped using CPU (the stream read to its end), it
reads their resident memory from /proc.

Prints one JSON line: {"cluster_pods": P, "nodes": N, "pods_here": K,
"catch_up_s": T, "rss_mib": {process: MiB}, "peak_rss_mib": {process: MiB}}

Run: .venv/bin/python bench/cluster_pods.py [--pods 30000] [--nodes 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import _common
from tidal_bus import Bus
from tidal_cli import Stack
from tidal_schemas import PodLifecycle, Resources

NAMESPACE, CLUSTER = "bench", "c1"
SERVICES = ["placement", "scoring", "oversell", "remediation"]
CAUGHT_UP = re.compile(r"pod table caught up: (\d+) pods here")


def running_pods(count: int, nodes: list[str]) -> list[PodLifecycle]:
    """Pods as the bridge reports them once running: node, uid, the decision
    that bound them, tenant and user labels."""
    now = datetime.now(timezone.utc)
    out = []
    for i in range(count):
        tenant = f"team-{i % 7}"
        out.append(PodLifecycle(
            namespace=tenant, name=f"run-{i:07d}", uid=str(uuid.uuid4()), phase="running",
            node=nodes[i % len(nodes)], decision_id=str(uuid.uuid4()), created_at=now, started_at=now,
            requests=Resources(cpu_milli=500, memory_mib=1024), tenant=tenant, user=f"{tenant}-user", qos="LS",
            labels={"tidal.dev/tenant": tenant, "tidal.dev/user": f"{tenant}-user", "tidal.dev/qos": "LS"}))
    return out


async def publish(url: str, nodes: int, pods: int, seed: int) -> str:
    """The cluster's inventories and running pods; the agent's node."""
    topologies = list(_common.topologies(nodes, np.random.default_rng(seed)))
    async with Bus.from_url(url, namespace=NAMESPACE, cluster=CLUSTER, source="bridge") as bus:
        await _common.publish_all(bus, topologies)
        await _common.publish_all(bus, running_pods(pods, [t.node for t in topologies]))
    return topologies[0].node


def wait_caught_up(log: Path, process, deadline: float) -> int:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise SystemExit(f"cluster_pods: the node agent exited ({process.returncode}): {''.join(last)[:300]}")
        found = CAUGHT_UP.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return int(found.group(1))
        time.sleep(0.2)
    raise SystemExit(f"cluster_pods: the node agent did not catch up in time; see {log}")


def wait_idle(stack: Stack, deadline: float, quiet_s: float = 2.0) -> None:
    """Until no process has used CPU for `quiet_s`: each has read the stream to its end."""
    last, quiet_since = None, time.monotonic()
    while time.monotonic() < deadline:
        stack.check_alive()
        now = [_common.cpu_seconds(s.process.pid) for s in stack.services]
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        time.sleep(0.25)
    raise SystemExit("cluster_pods: the services were still busy at the timeout")


def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="tidal-cluster-pods-") as tmp:
        cgroups = Path(tmp) / "cgroup"
        cgroups.mkdir()
        with Stack(Path(tmp) / "stack", nats_port=0, namespace=NAMESPACE, cluster=CLUSTER, services=[]) as stack:
            node = asyncio.run(publish(stack.bus_url, args.nodes, args.pods, args.seed))
            started = time.monotonic()
            deadline = started + args.timeout
            for name in SERVICES:
                stack.add(name)
            agent = stack.add("topology", env={
                "TIDAL_TOPOLOGY_NODE_NAME": node, "TIDAL_TOPOLOGY_CGROUP_ROOT": str(cgroups),
                "TIDAL_TOPOLOGY_CGROUP_VERSION": "v1", "TIDAL_TOPOLOGY_KUBELET_CPU_STATE": str(cgroups / "none")})
            here = wait_caught_up(agent.log_path, agent.process, deadline)
            wait_idle(stack, deadline)
            caught_up = time.monotonic() - started
            pids = {("node agent" if s.name == "topology" else s.name): s.process.pid for s in stack.services}
            return {"cluster_pods": args.pods, "nodes": args.nodes, "pods_here": here,
                    "catch_up_s": round(caught_up, 1),
                    "rss_mib": {name: _common.proc_status_mib(pid, "VmRSS") for name, pid in pids.items()},
                    "peak_rss_mib": {name: _common.proc_status_mib(pid) for name, pid in pids.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30_000, help="running pods in the cluster (default 30,000)")
    parser.add_argument("--nodes", type=int, default=1_000, help="nodes they run on (default 1,000)")
    parser.add_argument("--seed", type=int, default=0, help="the nodes' inventories")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the catch-up")
    print(json.dumps(run(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
