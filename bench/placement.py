"""Placement speed, in-process and end to end over the embedded NATS.

in-process: the policy core alone (decide + assume), from bench/placement_policy.py.
bus: the placement service as its own process; this script publishes the
synthetic cluster, then a burst of pending pods, and times each pod from its
publish to its decision arriving back (pending-to-decision latency).

Prints one JSON line per configuration:
{"nodes": N, "mode": "in-process" | "bus", "pods_per_s": X, "p50_ms": Y, "p99_ms": Z}

Run: .venv/bin/python bench/placement.py [--nodes 1000 5000 10000] [--pods 3000] [--modes in-process bus]
     [--rate R]   (bus: R pods/s paced; default one burst)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import placement_policy  # noqa: E402  (the in-process benchmark beside this file)
from _common import pods, topologies  # noqa: E402  (the synthetic cluster shared by the bus benchmarks)

from tidal_bus import Bus, StartAt  # noqa: E402
from tidal_cli.stack import Stack  # noqa: E402
from tidal_schemas.fence import DecisionFence  # noqa: E402


async def bus_run(nodes: int, count: int, seed: int, rate: float = 0.0) -> dict:
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp, Stack(Path(tmp), nats_port=0, namespace="bench", cluster="bench",
                                                     services=["placement"],
                                                     extra_env={"TIDAL_PLACEMENT_GPU_STRATEGY": "best-fit"}) as stack:
        stack.wait_ready()
        async with Bus.from_url(stack.bus_url, namespace="bench", cluster="bench", source="bench") as bus:
            for topology in topologies(nodes, rng):
                await bus.publish(topology)
            batch = pods(count, rng)
            sent: dict[str, float] = {}
            decided: dict[str, float] = {}

            async def collect() -> None:
                fence = DecisionFence()
                async for _, event in bus.read("placement.decision", StartAt.earliest(), follow=True):
                    d = event.payload
                    if fence.admit(d) and d.outcome != "fence":
                        decided.setdefault(d.event_key(), time.perf_counter())
                        if len(decided) == count:
                            return

            reader = asyncio.create_task(collect())
            await asyncio.sleep(1.0)  # let placement absorb the cluster before the burst
            start = time.perf_counter()
            for i, pod in enumerate(batch):
                if rate:  # paced arrivals: latency without a burst's queueing
                    await asyncio.sleep(max(start + i / rate - time.perf_counter(), 0))
                sent[pod.event_key()] = time.perf_counter()
                await bus.publish(pod)
            await asyncio.wait_for(reader, 600)
            end = max(decided.values())
    latencies = np.array([(decided[k] - sent[k]) * 1000 for k in sent])
    return {"nodes": nodes, "mode": "bus", "pods": count, "arrival_rate": rate or "burst",
            "pods_per_s": round(count / (end - start), 1),
            "p50_ms": round(float(np.percentile(latencies, 50)), 2),
            "p99_ms": round(float(np.percentile(latencies, 99)), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--modes", nargs="+", default=["in-process", "bus"], choices=["in-process", "bus"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="bus mode: pods published per second (0 = one burst, measures throughput)")
    args = parser.parse_args()
    for n in args.nodes:
        if "in-process" in args.modes:
            result = placement_policy.run(n, max(args.pods, 5000), "best-fit", 2.0, args.seed)
            print(json.dumps({"nodes": n, "mode": "in-process", **{k: result[k] for k in
                              ("pods_per_s", "p50_ms", "p99_ms")}}), flush=True)
        if "bus" in args.modes:
            print(json.dumps(asyncio.run(bus_run(n, args.pods, args.seed, args.rate))), flush=True)


if __name__ == "__main__":
    main()
