"""CPU time oversell spends on one node's sample (its handler: allocatable,
stop-scheduling and eviction checks; the bus left out) with a cluster's
running pods known, as they are from `pod.lifecycle` in production.

Every node's sample is handled at every period (500 samples a second at
5,000 nodes sampled every 10 s), so what one costs must not grow with the
pods of the whole cluster.

Prints one JSON line: {"nodes": N, "running_pods": P, "samples": S, "cpu_us_per_sample": X}

Run: .venv/bin/python bench/oversell_sample.py [--nodes 5000] [--pods 20000] [--samples 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import datetime, timezone

import numpy as np

import _common
from tidal_bus import Delivery
from tidal_oversell import OversellService, OversellSettings
from tidal_schemas import PodLifecycle, Resources, decode, encode, make_envelope

CLUSTER = "c1"


def _envelope(payload):
    return decode(encode(make_envelope(payload, source="bench", cluster=CLUSTER)))


async def main(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    topologies = list(_common.topologies(args.nodes, rng))
    now = datetime.now(timezone.utc)
    service = OversellService(OversellSettings(bus_url="nats://127.0.0.1:4222", namespace="bench", cluster=CLUSTER))

    async def publish(payload, **options) -> None:  # the bus is not measured here
        return None
    service.publish = service.allocatables.publish = publish  # its actions, and its batches of allocatable
    service.action_log_ready.set()
    delivery = Delivery("node.metrics", 0, 0, 1, replaying=False)
    for topology in topologies:
        await service.on_topology(_envelope(topology), delivery)
    for i in range(args.pods):
        service.pods.apply(CLUSTER, PodLifecycle(
            namespace="bench", name=f"run{i:06d}", phase="running", node=topologies[i % args.nodes].node,
            uid=f"uid-{i}", created_at=now, requests=Resources(cpu_milli=500, memory_mib=256)))
    samples = [_envelope(_common.node_sample(topologies[i % args.nodes], now, rng)) for i in range(args.samples)]
    started = time.process_time()
    for sample in samples:
        await service.on_metrics(sample, delivery)
    spent = time.process_time() - started
    print(json.dumps({"nodes": args.nodes, "running_pods": args.pods, "samples": args.samples,
                      "cpu_us_per_sample": round(spent * 1e6 / args.samples, 1)}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    _common.collect_oldest_only_when_asked()  # as in oversell's process
    asyncio.run(main(args))
