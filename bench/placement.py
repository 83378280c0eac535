"""Placement speed, in-process and end to end over the embedded NATS.

in-process: the policy core alone (decide + assume), from bench/placement_policy.py.
bus: the placement service as its own process; this script publishes the
synthetic cluster, then a burst of pending pods (`--rate R`: R a second, the
pods due within each 5 ms published together), and times each pod from its
publish to its decision arriving back (pending-to-decision latency).

`--strategy` is the GPU strategy (default: the placement service's own
default). `--sampling S` (bus mode) runs scoring, oversell and remediation
too, and the simulated node agents sample every node every S seconds while
the pods arrive (as bench/burst.py: each node at its own phase, an even
stream of samples; `--aligned-samples`, a whole round at one instant); 0,
the default, runs placement alone. `offered_per_s` is the arrival rate this
script achieved, `pods_per_s` the pods over the time to the last decision,
`cpu_ms_per_pod` each process's CPU time from the first pod to the last
decision over the pods (the samples' share included), `cpu_us_per_sample`
the same over the samples (the pods' share included: with few pods slowly,
`--rate 10 --pods 200`, it is what a sample costs).

Prints one JSON line per configuration:
{"nodes": N, "mode": "in-process" | "bus", "strategy": S, "pods_per_s": X, "p50_ms": Y, "p99_ms": Z, …}

Run: .venv/bin/python bench/placement.py [--nodes 1000 5000 10000] [--pods 3000] [--modes in-process bus]
     [--rate R] [--strategy S] [--sampling 10] [--aligned-samples]   (bus: R pods/s paced; default one burst)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import placement_policy  # noqa: E402  (the in-process benchmark beside this file)
from _common import (  # noqa: E402  (shared by the bus benchmarks)
    Actor, PUBLISH_WINDOW, agents_job, collect_oldest_only_when_asked, cpu_seconds, pods, process_row,
    publish_all, topologies,
)
from burst import BATCHED, SERVICES, first_samples, nodes_per_event  # noqa: E402

from tidal_bus import Bus, StartAt  # noqa: E402
from tidal_cli import Stack  # noqa: E402
from tidal_schemas.fence import DecisionFence  # noqa: E402

DEFAULT_STRATEGY = placement_policy.DEFAULT_STRATEGY
# Paced pods come as the pods due within a tick, as the agents' samples do
# (`_common._AGENT_TICK_S`): at 2,000 a second, 10 every 5 ms rather than a
# publish, and a write to the broker's socket, every 0.5 ms.
ARRIVAL_TICK_S = 0.005


async def bus_run(nodes: int, count: int, seed: int, rate: float = 0.0, strategy: str = DEFAULT_STRATEGY,
                  sampling: float = 0.0, aligned: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    services = SERVICES if sampling else ["placement"]
    with tempfile.TemporaryDirectory() as tmp, Stack(Path(tmp), nats_port=0, namespace="bench", cluster="bench",
                                                     services=services,
                                                     extra_env={"TIDAL_PLACEMENT_GPU_STRATEGY": strategy}) as stack:
        stack.wait_ready(timeout=120)
        agents = None
        async with Bus.from_url(stack.bus_url, namespace="bench", cluster="bench", source="bench") as bus:
            cluster = list(topologies(nodes, rng))
            await publish_all(bus, cluster)
            if sampling:  # the agents' first samples, turned into scores and allocatable before the pods
                await first_samples(stack, bus, cluster, rng)
                agents = Actor(agents_job, url=stack.bus_url, namespace="bench", cluster="bench", nodes=nodes,
                               mine=(0, nodes), seed=seed, interval_s=sampling, aligned=aligned)
                await asyncio.to_thread(agents.wait_ready)
            batch = pods(count, rng)
            sent: dict[str, float] = {}
            decided: dict[str, float] = {}

            async def collect() -> None:
                fence = DecisionFence()
                async for _, event in bus.read("placement.decision", StartAt.earliest(), follow=True):
                    for d in event.payload.items:
                        if fence.admit(d) and d.outcome != "fence":
                            decided.setdefault(d.event_key(), time.perf_counter())
                    if len(decided) == count:
                        return

            reader = asyncio.create_task(collect())
            await asyncio.sleep(1.0)  # let placement absorb the cluster before the burst
            processes = [(s.name, s.process.pid) for s in stack.services] + [("nats-server", stack.nats.pid),
                                                                              ("bench (pods, reader)", os.getpid())]
            cpu_before = {pid: cpu_seconds(pid) for _, pid in processes}
            if agents is not None:
                agents.go()
            start = time.perf_counter()
            # Not one ack at a time: the rate must not hang on the broker. A sliding window, not
            # a window waited for whole, which would bunch the arrivals.
            in_flight: set[asyncio.Task] = set()
            for i, pod in enumerate(batch):
                if rate and (wait := start + i / rate - time.perf_counter()) > 0:  # paced arrivals
                    await asyncio.sleep(wait + ARRIVAL_TICK_S)
                sent[pod.event_key()] = time.perf_counter()
                task = asyncio.create_task(bus.publish(pod))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                if len(in_flight) >= PUBLISH_WINDOW:
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            offered = count / max(time.perf_counter() - start, 1e-9)
            await asyncio.gather(*in_flight)
            await asyncio.wait_for(reader, 600)
            end = max(decided.values())
            rounds, samples, batching, per_sample = 0, 0, None, None
            if agents is not None:
                agents.stop()  # it publishes no more after its tick
            cpu = {name: process_row(name, pid, cpu_before[pid], count)["cpu_ms_per_pod"] for name, pid in processes}
            if agents is not None:
                sampled = await asyncio.to_thread(agents.result)
                rounds, samples = sampled["rounds"], sampled["events"]
                cpu["bench agents"] = round(1000 * sampled["cpu_s"] / count, 2)  # its process has ended: its own count
            if samples:
                per_sample = {name: round(ms * count / samples * 1000) for name, ms in cpu.items()}
                batching = {name: await nodes_per_event(bus, name) for name in BATCHED}
    latencies = np.array([(decided[k] - sent[k]) * 1000 for k in sent])
    return {"nodes": nodes, "mode": "bus", "strategy": strategy, "pods": count, "arrival_rate": rate or "burst",
            "offered_per_s": round(offered, 1), "sampling_s": sampling or None,
            "samples": ("aligned" if aligned else "spread") if sampling else None, "sample_rounds": rounds,
            "nodes_per_event": batching,
            "pods_per_s": round(count / (end - start), 1),
            "p50_ms": round(float(np.percentile(latencies, 50)), 2),
            "p99_ms": round(float(np.percentile(latencies, 99)), 2), "cpu_ms_per_pod": cpu,
            "cpu_us_per_sample": per_sample}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--modes", nargs="+", default=["in-process", "bus"], choices=["in-process", "bus"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="bus mode: pods published per second (0 = one burst, measures throughput)")
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY, help=f"default: the service's ({DEFAULT_STRATEGY})")
    parser.add_argument("--sampling", type=float, default=0.0,
                        help="bus mode: the agents sample every node every S seconds, with scoring, oversell and "
                             "remediation running (0 = placement alone, no samples)")
    parser.add_argument("--aligned-samples", action="store_true",
                        help="every node samples at the same instant, a whole round at once (the worst case); "
                             "default: each node at its own phase, an even stream of samples, as agents started at "
                             "different times send them")
    args = parser.parse_args()
    collect_oldest_only_when_asked()  # the observer's collector, as the services': less of the machine
    for n in args.nodes:
        if "in-process" in args.modes:
            result = placement_policy.run(n, max(args.pods, 5000), args.strategy, 2.0, args.seed)
            print(json.dumps({"nodes": n, "mode": "in-process", "strategy": args.strategy,
                              **{k: result[k] for k in ("pods_per_s", "p50_ms", "p99_ms")}}), flush=True)
        if "bus" in args.modes:
            print(json.dumps(asyncio.run(bus_run(n, args.pods, args.seed, args.rate, args.strategy, args.sampling,
                                                   args.aligned_samples))),
                  flush=True)


if __name__ == "__main__":
    main()
