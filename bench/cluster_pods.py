"""Memory of every service that follows the pods, in a cluster of many
running pods.

The bridge watches the cluster's pods and publishes them on
`pod.lifecycle`; placement, scoring and oversell follow that stream, and so
does every node agent (its books must hear of a pod it claimed being bound
elsewhere or deleted). What each keeps of a running pod is paid per pod of
the cluster, by the agent on every node, within memory limits
(`k8s/base`: 256 MiB for the bridge, oversell and the agent). The
placement benches create pending pods that nothing runs, so they do not
show it.

A stand-in API server (the simulator's, speaking the real HTTP wire
protocol) holds `--nodes` nodes and `--pods` running pods spread over them;
the nodes' inventories are published as their agents publish them. The
real placement, scoring, oversell, remediation and bridge start, each its
own process. With `--placed` the pods are created pending instead and
take the real path: placement decides, the bridge binds, and the bench
plays the kubelets, starting each pod once its Binding is written — a
cluster of pods Tidal placed, whose decisions are on the decision stream.
Once the bridge has published every pod, a node agent for the
first node (`tidal run topology`, on an empty cgroup tree: no pod cgroup
is touched) starts, as one restarted in a running cluster. Once the agent's
pod table has caught up and every stream has been read to its end, it reads
their resident memory from /proc. Read to its end is the broker's to say,
not a quiet CPU's (which a busy machine never shows): every JetStream
consumer of the bench's streams that has a reader, each group member's and
each follower's, has no message of its stream left to be handed and none
handed and not yet acknowledged, in every look at the broker over a second
(`Positions`). A follower acknowledges nothing: what it was handed
last is one fetch at most, in hand.

Prints one JSON line: {"cluster_pods": P, "nodes": N, "placed": bool, "pods_here": K,
"catch_up_s": T, "rss_mib": {process: MiB}, "peak_rss_mib": {process: MiB}}

Run: .venv/bin/python bench/cluster_pods.py [--pods 30000] [--nodes 1000] [--placed]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import yaml

import _common
from tidal_bus import Bus
from tidal_cli import CliError, Stack
from tidal_simulator.admitting_kubelets import AdmittingKubelets
from tidal_simulator.kube_api import KubeApiServer, write_kubeconfig
from tidal_simulator.pods import node_manifest, pod_manifest, sim_pod

NAMESPACE, CLUSTER = "bench", "c1"
SERVICES = ["placement", "scoring", "oversell", "remediation"]
CAUGHT_UP = re.compile(r"pod table caught up: (\d+) pods here")
CRDS = Path(__file__).resolve().parent.parent / "k8s" / "base" / "crds"


def cluster_pods(count: int, nodes: list[str], placed: bool) -> list[dict]:
    """Pod objects of seven tenants: bound to the nodes in turn and running,
    or pending (`placed`: for Tidal to place)."""
    now = datetime.now(timezone.utc)
    return [pod_manifest(sim_pod(f"team-{i % 7}", f"run-{i:07d}", cpu_milli=500, memory_mib=1024,
                                 tenant=f"team-{i % 7}", user=f"team-{i % 7}-user", qos="LS"),
                         now, **({} if placed else {"node": nodes[i % len(nodes)], "phase": "Running"}))
            for i in range(count)]


async def caught_up(log: Path, process, deadline: float) -> int:
    """The pods the node agent counts on its node once its pod table has caught up."""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise SystemExit(f"cluster_pods: the node agent exited ({process.returncode}): {''.join(last)[:300]}")
        found = CAUGHT_UP.search(log.read_text(errors="replace")) if log.exists() else None
        if found:
            return int(found.group(1))
        await asyncio.sleep(0.2)
    raise SystemExit(f"cluster_pods: the node agent did not catch up in time; see {log}")


def alive(stack: Stack) -> None:
    """Exit with a service's last log line if it died: its log goes with the temporary directory."""
    try:
        stack.check_alive()
    except CliError as gone:
        raise SystemExit(f"cluster_pods: {gone}") from None


async def published(stack: Stack, bridge, count: int, deadline: float) -> None:
    """Until the bridge has published a pod event for each of `count` pods (its /metrics)."""
    while time.monotonic() < deadline:
        alive(stack)
        with contextlib.suppress(OSError):
            out = _common.scrape(bridge.url)
            if sum(v for (name, labels), v in out.items() if name == "tidal_events_out_total"
                   and dict(labels).get("stream") == "pod.lifecycle") >= count:
                return
        await asyncio.sleep(0.5)
    raise SystemExit("cluster_pods: the bridge did not publish the pods in time")


async def until_running(kubelets: AdmittingKubelets, count: int, stack: Stack, deadline: float) -> None:
    """Until Tidal has placed every pod and the kubelets have started it."""
    while time.monotonic() < deadline:
        alive(stack)
        if kubelets.admitted >= count:
            return
        kubelets.changed.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(kubelets.changed.wait(), 1.0)
    raise SystemExit(f"cluster_pods: {kubelets.admitted} of {count} pods placed and running at the timeout")


class Positions:
    """Where every consumer of the bench's streams stands, look after look
    at the broker (JetStream's consumer info).

    A consumer is at its stream's end when it has no message left to be
    handed (num_pending 0) and none handed and not yet acknowledged
    (num_ack_pending 0, for a group's durable). A reader that ended (a
    catch-up read to a position, a replay) leaves its ephemeral consumer
    behind until the server's inactive threshold removes it, a minute
    later, with what was published since still pending: an ephemeral
    consumer that has never been seen asking (no pull request waiting) nor
    moving (its delivered sequence the same in every look) has no reader,
    and is left out. One that has been seen reading must be at the end."""

    def __init__(self, js) -> None:
        self.js = js
        self.first: dict[str, int] = {}  # consumer -> its delivered stream sequence at the first look
        self.read: set[str] = set()  # consumers seen asking or moving: a reader is there
        self.durable: set[str] = set()

    async def behind(self) -> dict[str, int]:
        """Consumer -> messages it has left, for each consumer with a reader
        that is not at its stream's end (empty: every stream read to its end)."""
        found: dict[str, int] = {}
        for info in await self.js.streams_info():
            name = info.config.name
            if not name.startswith(f"{NAMESPACE}_".upper()):  # the bench's streams; not the members' KV buckets
                continue
            for consumer in await self.js.consumers_info(name):
                key = f"{name}/{consumer.name}"
                at = consumer.delivered.stream_seq if consumer.delivered else 0
                self.first.setdefault(key, at)
                if consumer.config.durable_name:
                    self.durable.add(key)
                if (consumer.num_waiting or 0) > 0 or at != self.first[key]:
                    self.read.add(key)
                left = (consumer.num_pending or 0) + (consumer.num_ack_pending or 0)
                if left and (key in self.durable or key in self.read):
                    found[key] = left
        return found


LOOK_EVERY_S = 0.25
LOOKS = 5  # in a row, over a second: a reader at rest asks again within its pull request's expiry (1 s)


async def read_to_the_end(stack: Stack, bus: Bus, deadline: float) -> None:
    """Until every consumer with a reader is at its stream's end, in LOOKS
    looks in a row (see Positions): the streams' positions decide, not how
    busy the machine is."""
    positions, last, in_a_row = Positions(bus.backend.js), {}, 0
    while time.monotonic() < deadline:
        alive(stack)
        last = await positions.behind()
        in_a_row = 0 if last else in_a_row + 1
        if in_a_row == LOOKS:
            return
        await asyncio.sleep(LOOK_EVERY_S)
    raise SystemExit(f"cluster_pods: consumers not at their stream's end at the timeout: {last}")


async def run(args: argparse.Namespace) -> dict:
    cluster = list(_common.topologies(args.nodes, np.random.default_rng(args.seed)))
    api = KubeApiServer()
    await api.start()
    for crd in sorted(CRDS.glob("*.yaml")):  # the cluster has Tidal's manifests applied
        api.custom.register(yaml.safe_load(crd.read_text()))
    for topology in cluster:
        api.create_node(node_manifest(topology))
    kubelets = AdmittingKubelets(api) if args.placed else None
    for pod in cluster_pods(args.pods, [t.node for t in cluster], args.placed):
        api.create_pod(pod)
    async with contextlib.AsyncExitStack() as exits:  # closed in turn: the stack, the API server
        exits.push_async_callback(api.stop)
        if kubelets is not None:
            playing = asyncio.create_task(kubelets.run())
            exits.callback(playing.cancel)
        tmp = Path(exits.enter_context(tempfile.TemporaryDirectory(prefix="tidal-cluster-pods-")))
        (tmp / "cgroup").mkdir()
        stack = exits.enter_context(Stack(tmp / "stack", nats_port=0, namespace=NAMESPACE, cluster=CLUSTER,
                                          services=SERVICES))
        bus = await exits.enter_async_context(Bus.from_url(stack.bus_url, namespace=NAMESPACE, cluster=CLUSTER,
                                                           source="agents"))
        await _common.publish_all(bus, cluster)  # what the node agents publish first
        started = time.monotonic()
        deadline = started + args.timeout
        bridge = await asyncio.to_thread(stack.add, "bridge", {
            "TIDAL_BRIDGE_KUBECONFIG": str(write_kubeconfig(tmp / "kubeconfig", api.url))})
        if kubelets is not None:
            await until_running(kubelets, args.pods, stack, deadline)
        await published(stack, bridge, args.pods, deadline)
        agent = await asyncio.to_thread(stack.add, "topology", {
            "TIDAL_TOPOLOGY_NODE_NAME": cluster[0].node, "TIDAL_TOPOLOGY_CGROUP_ROOT": str(tmp / "cgroup"),
            "TIDAL_TOPOLOGY_CGROUP_VERSION": "v1", "TIDAL_TOPOLOGY_KUBELET_CPU_STATE": str(tmp / "cgroup" / "none")})
        here = await caught_up(agent.log_path, agent.process, deadline)
        await read_to_the_end(stack, bus, deadline)
        took = time.monotonic() - started
        pids = {("node agent" if s.name == "topology" else s.name): s.process.pid for s in stack.services}
        return {"cluster_pods": args.pods, "nodes": args.nodes, "placed": args.placed, "pods_here": here,
                "catch_up_s": round(took, 1),
                "rss_mib": {name: _common.proc_status_mib(pid, "VmRSS") for name, pid in pids.items()},
                "peak_rss_mib": {name: _common.proc_status_mib(pid) for name, pid in pids.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30_000, help="running pods in the cluster (default 30,000)")
    parser.add_argument("--nodes", type=int, default=1_000, help="nodes they run on (default 1,000)")
    parser.add_argument("--placed", action="store_true",
                        help="create the pods pending, for Tidal to place and bind (its decisions on the stream)")
    parser.add_argument("--seed", type=int, default=0, help="the nodes' inventories")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the catch-up")
    _common.collect_oldest_only_when_asked()
    print(json.dumps(asyncio.run(run(parser.parse_args()))), flush=True)


if __name__ == "__main__":
    main()
