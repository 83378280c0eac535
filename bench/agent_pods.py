"""Memory of one node agent in a cluster of many pods.

An agent follows the cluster's `pod.lifecycle` stream (its books must hear
of a pod it claimed being bound elsewhere or deleted), so what it keeps of
each pod of *other* nodes is paid on every node, within the DaemonSet's
memory limit (256 MiB, k8s/base/topology.yaml).

The bench publishes `--pods` running pods spread over `--nodes` nodes, as
the bridge reports them, then starts a real node agent (`tidal run
topology`, on an empty cgroup tree: no pod cgroup is touched) for the
first node, waits until its pod table has caught up with the stream, and
reads its resident memory from /proc.

Prints one JSON line: {"cluster_pods": P, "nodes": N, "pods_here": K,
"rss_mib": X, "peak_rss_mib": Y, "catch_up_s": T}

Run: .venv/bin/python bench/agent_pods.py [--pods 30000] [--nodes 1000]
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

import _common
from tidal_bus import Bus
from tidal_cli import Stack
from tidal_schemas import PodLifecycle, Resources

NAMESPACE, CLUSTER = "bench", "c1"
CAUGHT_UP = re.compile(r"pod table caught up: (\d+) pods here")


def running_pods(count: int, nodes: int) -> list[PodLifecycle]:
    """Pods as the bridge reports them once running: node, uid, the decision
    that bound them, tenant and user labels."""
    now = datetime.now(timezone.utc)
    out = []
    for i in range(count):
        tenant = f"team-{i % 7}"
        out.append(PodLifecycle(
            namespace=tenant, name=f"run-{i:07d}", uid=str(uuid.uuid4()), phase="running",
            node=f"node-{i % nodes:05d}", decision_id=str(uuid.uuid4()), created_at=now, started_at=now,
            requests=Resources(cpu_milli=2000, memory_mib=4096), tenant=tenant, user=f"{tenant}-user", qos="LS",
            labels={"tidal.dev/tenant": tenant, "tidal.dev/user": f"{tenant}-user", "tidal.dev/qos": "LS"}))
    return out


async def publish(url: str, pods: list[PodLifecycle]) -> None:
    async with Bus.from_url(url, namespace=NAMESPACE, cluster=CLUSTER, source="bridge") as bus:
        await _common.publish_all(bus, pods)


def wait_caught_up(log: Path, process, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"agent_pods: the agent exited ({process.returncode}); see {log}")
        found = CAUGHT_UP.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return int(found.group(1))
        time.sleep(0.2)
    raise SystemExit(f"agent_pods: the agent did not catch up within {timeout:.0f} s; see {log}")


def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="tidal-agent-pods-") as tmp:
        cgroups = Path(tmp) / "cgroup"
        cgroups.mkdir()
        with Stack(Path(tmp) / "stack", nats_port=0, namespace=NAMESPACE, cluster=CLUSTER, services=[]) as stack:
            asyncio.run(publish(stack.bus_url, running_pods(args.pods, args.nodes)))
            started = time.monotonic()
            agent = stack.add("topology", env={
                "TIDAL_TOPOLOGY_NODE_NAME": "node-00000", "TIDAL_TOPOLOGY_CGROUP_ROOT": str(cgroups),
                "TIDAL_TOPOLOGY_CGROUP_VERSION": "v1", "TIDAL_TOPOLOGY_KUBELET_CPU_STATE": str(cgroups / "none")})
            here = wait_caught_up(agent.log_path, agent.process, args.timeout)
            caught_up = time.monotonic() - started
            time.sleep(args.settle)  # what the event loop still holds of the catch-up goes first
            pid = agent.process.pid
            return {"cluster_pods": args.pods, "nodes": args.nodes, "pods_here": here,
                    "rss_mib": _common.proc_status_mib(pid, "VmRSS"), "peak_rss_mib": _common.proc_status_mib(pid),
                    "catch_up_s": round(caught_up, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30_000, help="running pods in the cluster (default 30,000)")
    parser.add_argument("--nodes", type=int, default=1_000, help="nodes they run on (default 1,000)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the catch-up")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between the catch-up and the reading")
    print(json.dumps(run(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
