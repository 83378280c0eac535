"""The cluster path end to end: pods created in a Kubernetes API server until bound.

A stand-in API server (the simulator's, speaking the real HTTP wire protocol)
holds `--nodes` nodes and answers every request for one pod or node
`--api-latency-ms` late: an API server's round trip in a real cluster.
The node agents' topologies are published; the real bridge and placement
run as their own processes. Then `--pods` pods of the openb-like mix
(bench/placement_policy.py) are created in the API server, at once or
`--rate` a second, as a user's controller would create them, and each is
timed from its creation to its Binding reaching the API server: the
bridge's watch and pod event, placement's decision, the bridge's bind.
At the end the run's streams are audited as `tidal audit` does (no pod
placed twice, nothing held beyond allocatable, …).

Before the stack starts, the same run measures placement's in-process
decision rate at the same node count, strategy and pod count as
bench/placement_policy.py does (`--clock cpu`: decide + assume timed by
the thread's CPU time), so the ratio of the two holds on any machine.

Prints one JSON line:
{"nodes": N, "pods": P, "strategy": S, "api_latency_ms": L, "arrival_rate": R | "burst", "bound": B,
 "pods_per_s": X, "in_process_pods_per_s": I, "ratio": X / I, "p50_ms": Y, "p99_ms": Z,
 "cpu_ms_per_pod": {process: ms}, "in_process_cpu_ms_per_pod": 1000 / I,
 "bridge_cpu_vs_decision": bridge's ms / in-process ms, "api_requests_per_pod": {…},
 "invariant_violations": V, "violations": [the first five]}
`pods_per_s` is the pods bound over the time from the first creation to the
last Binding (created → bound); `cpu_ms_per_pod` each process's CPU time
over that span, per pod (the bench's own is the API server's and the pods'
creation). Issue 53's goals: `ratio` ≥ 0.5, `bridge_cpu_vs_decision` ≤ 1.

Run: .venv/bin/python bench/bridge_path.py [--nodes 1000] [--pods 5000] [--rate R] [--api-latency-ms 2]
     [--strategy S] [--bind-concurrency N] [--idle-s 15]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import placement_policy  # noqa: E402  (the pod mix)
from _common import collect_oldest_only_when_asked, cpu_seconds, process_row, publish_all, topologies  # noqa: E402

from tidal_audit import audit, read_streams  # noqa: E402
from tidal_bus import Bus  # noqa: E402
from tidal_cli import Stack  # noqa: E402
from tidal_schemas import GpuAsk  # noqa: E402
from tidal_simulator.admitting_kubelets import AdmittingKubelets  # noqa: E402
from tidal_simulator.kube_api import KubeApiServer, write_kubeconfig  # noqa: E402
from tidal_simulator.pods import node_manifest, pod_manifest, sim_pod  # noqa: E402

DEFAULT_STRATEGY = placement_policy.DEFAULT_STRATEGY
NAMESPACE = "bench"
# what a bind asks of the API server, one pod or node at a time (the list and watch streams are not slowed)
SLOWED = (("GET", "/api/v1/namespaces/"), ("PATCH", "/api/v1/namespaces/"), ("POST", "/api/v1/namespaces/"),
          ("GET", "/api/v1/nodes/"))
IDLE_S = 15.0  # no pod bound for this long: the rest stay pending (or are lost), the run ends
LIVE_PER_NODE = 3.0  # placement_policy's default: pods depart past it, so the in-process cache stays part full


def manifests(count: int, rng: np.random.Generator) -> list[dict]:
    """Pod objects of the openb-like mix, as a user submits them."""
    now = datetime.now(timezone.utc)
    out = []
    for i, r in enumerate(placement_policy.pod_mix(count, rng)):
        gpu = GpuAsk(count=r.gpu_count, milli=r.gpu_milli, models=list(r.gpu_models)) if r.gpu_count else GpuAsk()
        pod = sim_pod(NAMESPACE, f"p{i:06d}", cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, gpu=gpu,
                      exclusive_cpus=r.exclusive_cpus, cpu_policy=r.cpu_policy if r.exclusive_cpus else None)
        out.append(pod_manifest(pod, now))
    return out


def in_process(nodes: int, count: int, seed: int, strategy: str) -> dict:
    """placement_policy's in-process figures for this run's node count, pods and strategy (CPU clock)."""
    return placement_policy.run(nodes, count, strategy, LIVE_PER_NODE, seed, clock="cpu")


async def run(nodes: int, count: int, seed: int, rate: float, latency_ms: float, strategy: str,
              bind_concurrency: int | None, idle_s: float = IDLE_S) -> dict:
    deciding = in_process(nodes, count, seed, strategy)  # before the stack: nothing else of this run competes
    rng = np.random.default_rng(seed)
    cluster = list(topologies(nodes, rng))
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    all_bound = asyncio.Event()

    def admit(pod: dict, node: str) -> None:  # the Binding has reached the API server
        meta = pod["metadata"]
        bound.setdefault(f"{meta['namespace']}/{meta['name']}", time.perf_counter())
        if len(bound) == count:
            all_bound.set()

    api = KubeApiServer(record_requests=True)
    kubelets = AdmittingKubelets(api, on_binding=admit)  # admitted: the next GPU pod of its size may bind
    await api.start()
    for topology in cluster:
        api.create_node(node_manifest(topology))
    for method, path in SLOWED:
        api.slow(method, path, latency_ms / 1000)
    async with contextlib.AsyncExitStack() as exits:  # closed in turn: the bus, the stack, the API server
        exits.push_async_callback(api.stop)
        admitting = asyncio.create_task(kubelets.run())
        exits.callback(admitting.cancel)
        tmp = exits.enter_context(tempfile.TemporaryDirectory())
        stack = exits.enter_context(Stack(Path(tmp), nats_port=0, namespace="bench", cluster="bench",
                                          services=["placement"],
                                          extra_env={"TIDAL_PLACEMENT_GPU_STRATEGY": strategy}))
        bridge_env = {"TIDAL_BRIDGE_KUBECONFIG": str(write_kubeconfig(Path(tmp) / "kubeconfig", api.url))}
        if bind_concurrency is not None:
            bridge_env["TIDAL_BRIDGE_BIND_CONCURRENCY"] = str(bind_concurrency)
        stack.wait_ready(timeout=120)
        bus = await exits.enter_async_context(
            Bus.from_url(stack.bus_url, namespace="bench", cluster="bench", source="bench"))
        await publish_all(bus, cluster)  # what the node agents publish first
        bridge = await asyncio.to_thread(stack.add, "bridge", bridge_env)
        await asyncio.to_thread(stack.wait_ready, 120, [bridge])
        await asyncio.sleep(1.0)  # let placement absorb the cluster before the pods
        pods = manifests(count, rng)
        processes = [("bridge", bridge.process.pid), ("placement", stack.service("placement").process.pid),
                     ("nats-server", stack.nats.pid), ("bench (API server)", os.getpid())]
        cpu_before = {pid: cpu_seconds(pid) for _, pid in processes}
        requests_before = len(api.requests)
        start = time.perf_counter()
        for i, pod in enumerate(pods):
            if rate:
                await asyncio.sleep(max(start + i / rate - time.perf_counter(), 0))
            created[f"{NAMESPACE}/{pod['metadata']['name']}"] = time.perf_counter()
            api.create_pod(pod)
            if i % 200 == 199:
                await asyncio.sleep(0)  # a burst still lets the server answer as it goes
        offered = count / max(time.perf_counter() - start, 1e-9)
        await _until_bound(all_bound, bound, idle_s)
        end = max(bound.values(), default=time.perf_counter())
        cpu = {name: process_row(name, pid, cpu_before[pid], max(len(bound), 1))["cpu_ms_per_pod"]
               for name, pid in processes}
        asked = Counter(f"{method} {_kind(path)}" for method, path, _ in api.requests[requests_before:])
        await asyncio.sleep(1.0)  # the last bind results on their way
        violations = audit(await read_streams(bus), cluster="bench")  # the guarantees, checked on this run
    latencies = np.array([(bound[k] - created[k]) * 1000 for k in bound])
    bound_per_s, decided_per_s = len(bound) / max(end - start, 1e-9), deciding["pods_per_s"]
    decision_ms = 1000 / decided_per_s
    return {"nodes": nodes, "pods": count, "strategy": strategy, "api_latency_ms": latency_ms,
            "bind_concurrency": bind_concurrency, "arrival_rate": rate or "burst", "offered_per_s": round(offered, 1),
            "bound": len(bound), "pods_per_s": round(bound_per_s, 1),
            "in_process_pods_per_s": decided_per_s, "ratio": round(bound_per_s / decided_per_s, 3),
            "p50_ms": round(float(np.percentile(latencies, 50)), 1) if len(latencies) else None,
            "p99_ms": round(float(np.percentile(latencies, 99)), 1) if len(latencies) else None,
            "cpu_ms_per_pod": cpu, "in_process_cpu_ms_per_pod": round(decision_ms, 3),
            "bridge_cpu_vs_decision": round(cpu["bridge"] / decision_ms, 2) if cpu["bridge"] is not None else None,
            "api_requests_per_pod": {k: round(v / max(len(bound), 1), 2) for k, v in sorted(asked.items())},
            "invariant_violations": len(violations), "violations": [v.line() for v in violations[:5]]}


async def _until_bound(all_bound: asyncio.Event, bound: dict, idle_s: float) -> None:
    # every pod bound, or none bound for `idle_s` (pods placement keeps pending: the cluster is full)
    seen, last = -1, time.perf_counter()
    while not all_bound.is_set() and time.perf_counter() - last < idle_s:
        if len(bound) != seen:
            seen, last = len(bound), time.perf_counter()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(all_bound.wait(), 0.5)


def _kind(path: str) -> str:
    # /api/v1/namespaces/bench/pods/p000001/binding -> pods/binding; /api/v1/nodes/node-00001 -> nodes
    parts = path.strip("/").split("/")
    if "namespaces" in parts:
        parts = parts[parts.index("namespaces") + 2:]
    elif parts[:2] == ["api", "v1"]:
        parts = parts[2:]
    return "/".join(p for i, p in enumerate(parts) if i % 2 == 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=0.0, help="pods created a second (default: all at once)")
    parser.add_argument("--api-latency-ms", type=float, default=2.0,
                        help="how late the API server answers each request for one pod or node")
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY, help="placement's GPU strategy (default: its own)")
    parser.add_argument("--bind-concurrency", type=int, default=None,
                        help="the bridge's binds in flight (default: its own setting)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--idle-s", type=float, default=IDLE_S,
                        help=f"end the run when no pod was bound for this long (default {IDLE_S:g})")
    args = parser.parse_args()
    collect_oldest_only_when_asked()
    print(json.dumps(asyncio.run(run(args.nodes, args.pods, args.seed, args.rate, args.api_latency_ms,
                                     args.strategy, args.bind_concurrency, args.idle_s))), flush=True)


if __name__ == "__main__":
    main()
