"""CPU time per event of reading the bus, as the services read it, over the
embedded NATS server: what each node's sample costs every stage before its
own work.

- follower: placement's path for a per-node stream. `Bus.catch_up_then_follow`
  over `score.node` into placement's own cache (`ClusterCache.apply`).
- group: the path of scoring, oversell and remediation. A `Consumer` in a
  group over `score.node` with a handler that does nothing, so the figure
  is the bus's part (fetch, decode, dedupe, metrics, ack).
- group-window: the same through an output window, as the services read
  samples: remediation's path for the samples that need no action.
- relay: the same with a handler that publishes one event per event read,
  each output waited for before the next event (a consumer without a window);
- relay-window: the same as scoring, oversell and remediation read samples:
  outputs waited for a window of events at a time (`output_window`, the
  services' default; tidal_bus.output_window).
- pods: `--nodes` pending pods' events over `pod.lifecycle`, read whole as
  placement reads the pods (`Bus.catch_up_then_follow`);
- pods-main-lane: the same pods read as fair share, oversell and the node
  agents read them, the main lane only: the broker sends none of them
  (`StreamSpec.side_lane`), and the figure is the cost of each pending pod
  to such a reader.

`--nodes` events are published first (one event per node, each holding
that node's score: the per-event cost, whatever an event holds; for the pod
paths, as many pods), then read once; only the reading is timed, by the
process's CPU clock.

Prints one JSON line per path: {"path": P, "events": N, "cpu_us_per_event": X}

Run: .venv/bin/python bench/bus_read.py [--nodes 5000] [--paths follower group group-window relay relay-window]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import _common
from tidal_bus import Bus, Consumer, StartAt
from tidal_bus.embedded import EmbeddedNats
from tidal_placement import ClusterCache
from tidal_schemas import NodeScore, NodeScores
from tidal_runtime import ServiceSettings
from tidal_schemas.streams import stream

CLUSTER = "c1"
OUTPUT_WINDOW = ServiceSettings.model_fields["output_window"].default


async def follower(bus: Bus, topologies: list, count: int) -> float:
    cache = ClusterCache(CLUSTER, 30.0, 0.0)
    for topology in topologies:
        cache.apply(topology, time.time())
    caught_up = asyncio.Event()

    async def on_event(envelope) -> None:
        cache.apply(envelope.payload, time.time())

    async def done() -> None:
        caught_up.set()
    started = time.process_time()
    task = asyncio.create_task(bus.catch_up_then_follow("score.node", on_event, done))
    await caught_up.wait()
    spent = time.process_time() - started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return spent


async def pods(bus: Bus, topologies: list, count: int, main_lane_only: bool = False) -> float:
    await _common.publish_all(bus, _common.pods(count, np.random.default_rng(0)))  # pending, as they arrive
    caught_up = asyncio.Event()

    async def on_event(envelope) -> None:
        return None

    async def done() -> None:
        caught_up.set()
    started = time.process_time()
    task = asyncio.create_task(bus.catch_up_then_follow("pod.lifecycle", on_event, done,
                                                        main_lane_only=main_lane_only))
    await caught_up.wait()
    spent = time.process_time() - started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await bus.backend.delete_stream(stream("pod.lifecycle"))  # the next path publishes its own
    return spent


async def pods_main_lane(bus: Bus, topologies: list, count: int) -> float:
    return await pods(bus, topologies, count, main_lane_only=True)


async def group(bus: Bus, topologies: list, count: int, relay: bool = False, window: int = 1) -> float:
    handled = 0

    async def handler(envelope, delivery) -> None:
        nonlocal handled
        if relay:
            await bus.publish(envelope.payload, cause=envelope)
        handled += 1
    consumer = Consumer(bus, stream("score.node"), f"bench-read-{relay}-{window}", handler,
                        start=StartAt.earliest(), window=window)
    started = time.process_time()
    task = asyncio.create_task(consumer.run())
    while handled < count:
        await asyncio.sleep(0.01)
    spent = time.process_time() - started
    consumer.stop()
    await task
    return spent


async def group_window(bus: Bus, topologies: list, count: int) -> float:
    return await group(bus, topologies, count, window=OUTPUT_WINDOW)


async def relay(bus: Bus, topologies: list, count: int) -> float:
    return await group(bus, topologies, count, relay=True)


async def relay_window(bus: Bus, topologies: list, count: int) -> float:
    return await group(bus, topologies, count, relay=True, window=OUTPUT_WINDOW)


PATHS = {"follower": follower, "group": group, "group-window": group_window, "relay": relay, "relay-window": relay_window,
         "pods": pods, "pods-main-lane": pods_main_lane}


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as data:
        server = EmbeddedNats(Path(data)).start()
        try:
            bus = Bus.from_url(server.url, namespace="benchread", cluster=CLUSTER, source="bench")
            await bus.backend.connect()
            await bus.ensure_streams()
            topologies = list(_common.topologies(args.nodes, np.random.default_rng(args.seed)))
            now = datetime.now(timezone.utc)
            scores = [NodeScore(node=t.node, load=0.3, numa_load={0: 0.2, 1: 0.4}, sampled_at=now) for t in topologies]
            await _common.publish_all(bus, [NodeScores.of(score) for score in scores])
            for path in args.paths:
                spent = await PATHS[path](bus, topologies, args.nodes)
                print(json.dumps({"path": path, "events": args.nodes,
                                  "cpu_us_per_event": round(spent * 1e6 / args.nodes, 1)}), flush=True)
            await bus.backend.close()
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    _common.collect_oldest_only_when_asked()  # as in a service's process
    asyncio.run(main(args))
