"""What the node agents' samples cost, with only the stages named running.

The embedded NATS and the stages named (`--stages`, default scoring,
oversell and remediation), each as its own process; this script publishes
the synthetic cluster (bench/_common.py) and a first sample of every node,
then the simulated agents sample every node every `--interval` seconds,
each at its own phase (as bench/placement.py's `--sampling`), for
`--seconds`, or for `--rounds` samples of every node (a bound of work: the
samples measured are as many on any machine). No pods. `--stages` with no name: the broker storing the
samples with nobody reading them.

Prints one JSON line: {"nodes": N, "stages": [...], "samples": S,
"cpu_us_per_sample": {process: µs of CPU over the measured window, over the
samples published in it}}.

Run: .venv/bin/python bench/sample_cost.py [--nodes 5000] [--interval 10] [--seconds 15 | --rounds R]
     [--stages scoring oversell remediation]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import Actor, agents_job, cpu_seconds, publish_all, topologies  # noqa: E402
from burst import SERVICES, first_samples  # noqa: E402

from tidal_bus import Bus  # noqa: E402
from tidal_cli import Stack  # noqa: E402


async def run(nodes: int, stages: list[str], interval_s: float, seconds: float, seed: int = 0,
              rounds: int | None = None) -> dict:
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp, Stack(Path(tmp), nats_port=0, namespace="bench", cluster="bench",
                                                     services=stages) as stack:
        stack.wait_ready(timeout=120)
        async with Bus.from_url(stack.bus_url, namespace="bench", cluster="bench", source="bench") as bus:
            cluster = list(topologies(nodes, rng))
            await publish_all(bus, cluster)
            await first_samples(stack, bus, cluster, rng)
            agents = Actor(agents_job, url=stack.bus_url, namespace="bench", cluster="bench", nodes=nodes,
                           mine=(0, nodes), seed=seed, interval_s=interval_s, rounds=rounds)
            await asyncio.to_thread(agents.wait_ready)
            processes = [(s.name, s.process.pid) for s in stack.services] + [("nats-server", stack.nats.pid)]
            before = {pid: cpu_seconds(pid) for _, pid in processes}
            agents.go()
            if rounds is None:
                await asyncio.sleep(seconds)
                after = {pid: cpu_seconds(pid) for _, pid in processes}
                agents.stop()
                sampled = await asyncio.to_thread(agents.result)
            else:  # the agents end after their rounds
                sampled = await asyncio.to_thread(agents.result)
                after = {pid: cpu_seconds(pid) for _, pid in processes}
    samples = max(sampled["events"], 1)
    cost = {name: round(1e6 * (after[pid] - before[pid]) / samples) for name, pid in processes}
    cost["bench agents"] = round(1e6 * sampled["cpu_s"] / samples)
    return {"nodes": nodes, "stages": stages, "interval_s": interval_s, "samples": sampled["events"],
            "cpu_us_per_sample": cost}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between a node's samples")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long the samples are measured")
    parser.add_argument("--rounds", type=int, default=None,
                        help="measure this many samples of every node instead of --seconds")
    parser.add_argument("--stages", nargs="*", default=[s for s in SERVICES if s != "placement"],
                        choices=SERVICES, help="the stages running (none: the broker alone)")
    args = parser.parse_args()
    if args.nodes < 1 or args.interval <= 0 or args.seconds <= 0 or (args.rounds is not None and args.rounds < 1):
        parser.error("--nodes, --interval, --seconds and --rounds must be positive")
    print(json.dumps(asyncio.run(run(args.nodes, args.stages, args.interval, args.seconds, rounds=args.rounds))),
          flush=True)


if __name__ == "__main__":  # the agents run in a spawned process, which imports this file
    main()
