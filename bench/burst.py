"""A burst of pending pods on a simulated cluster, through the real services.

The stack is services/tidal_cli/stack.py's: the embedded nats-server (or, with
`--bus kafka`, the embedded Tansu Kafka-protocol broker) and placement,
scoring, oversell and remediation, each its own process. This script plays
the cluster: it publishes every node's topology and a first round of node
agent samples, waits until scoring and oversell have turned them into node
scores and allocatable, and checks placement is deciding (one warm-up pod).
Then the burst: a process standing for the cluster's users publishes the
pods as fast as the broker acks them (256 in flight), a process standing for
the node agents samples every node every `--metrics-interval` seconds (each
node at its own phase, so the samples come as an even stream, as from
agents started at different times; `--aligned-samples`: a whole round at
one instant, the worst case), and this script only reads
`placement.decision` back. Nothing binds the pods (placement's bind timeout
is raised past the run), so placement's own work is what is measured.

Reports, and prints as one JSON line:
  drain_s          first pod published -> last pod's first decision read here
                   (a pod of a type held back by a waiting pod of that type
                   gets none until that pod fits or its permit, 30 s, expires)
  decided_Npct_s   first pod published -> N % of the pods decided (50, 90, 99)
  decisions_per_s  pods / drain_s
  p50/p99_ms       pending-to-decision latency: the pod event's time -> its
                   first decision read here
  observer_p99_ms  the decision event's time -> read here (how much of the
                   latency is this script's own delay)
  placed / pending the first decisions' outcomes (pending: no room now, or
                   held back: §C's waiting queue, a pod of the same resource
                   type with a better score waits for room, so this one is
                   not tried until that one is placed or its permit expires)
  held_back        of the pending, those held back (no node tried)
  pending_filtered why the others: per filter, the nodes it took out of a
                   pod's candidates, on average over the pods without room
  nodes_per_event  how many nodes' figures a score.node / node.allocatable
                   event held on average over the run (one event per
                   partition for the samples a stage had in hand)
  peak RSS (VmHWM) and CPU seconds of every service process and the broker,
                   and their CPU time from the burst's start per pod

Run: .venv/bin/python bench/burst.py [--nodes 5000] [--pods 20000] [--bus nats|kafka]
         [--metrics-interval 10] [--aligned-samples] [--strategy S] [--seed 0]

`--strategy` (alias `--gpu-strategy`) is placement's GPU strategy, by default
the service's own default. With `--metrics-interval 0` no sample follows the
first round, so placement's staleness rule is turned off for that run
(`TIDAL_PLACEMENT_NODE_STALE_AFTER_S=0`): otherwise every node goes stale
30 s after its first sample and the late pods of the burst are refused for
that, not for want of room.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    Actor, agents_job, collect_oldest_only_when_asked, cpu_seconds, handled_by_partition, node_sample, process_row,
    percentile_ms, pods, pods_job, publish_all, table, topologies,
)

from tidal_bus import Bus, StartAt  # noqa: E402
from tidal_bus.embedded import EmbeddedKafka  # noqa: E402
from tidal_cli import Stack  # noqa: E402
from tidal_schemas.fence import DecisionFence  # noqa: E402
from tidal_placement import PlacementSettings  # noqa: E402

DEFAULT_STRATEGY = PlacementSettings.model_fields["gpu_strategy"].default

SERVICES = ["placement", "scoring", "oversell", "remediation"]
STAGES = {"node.topology": ("oversell", "remediation"), "node.metrics": ("scoring", "oversell", "remediation")}
NAMESPACE, CLUSTER = "burst", "bench"


class Decisions:
    """The first decision of every pod, as read from the decision log."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[float, str, float]] = {}  # pod -> (read at, outcome, decision time)
        # pod left pending -> nodes filtered out, by reason (none: held back behind a better pod of its type)
        self.filtered: dict[str, dict[str, int]] = {}
        self.arrived = asyncio.Event()

    async def follow(self, bus: Bus) -> None:
        fence = DecisionFence()
        async for _, event in bus.read("placement.decision", StartAt.earliest(), follow=True):
            for d in event.payload.items:  # a scheduling cycle's decisions, published together at its time
                if fence.admit(d) and d.outcome != "fence" and d.event_key() not in self.first:
                    self.first[d.event_key()] = (time.time(), d.outcome, event.time.timestamp())
                    if d.outcome == "pending":
                        self.filtered[d.event_key()] = d.filtered
                    self.arrived.set()

    async def wait_for(self, keys: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not keys <= self.first.keys():
            if time.monotonic() > deadline:
                missing = len(keys - self.first.keys())
                raise TimeoutError(f"{missing} of {len(keys)} pods without a decision after {timeout:.0f}s")
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), 1.0)
            except asyncio.TimeoutError:
                pass


def pending_filtered(filtered: list[dict[str, int]]) -> dict[str, float]:
    """Why pods were left pending: per filter, the nodes it took out of a
    pending pod's candidates, on average over those pods."""
    totals: dict[str, int] = {}
    for counts in filtered:
        for reason, nodes in counts.items():
            totals[reason] = totals.get(reason, 0) + nodes
    return {reason: round(total / len(filtered), 1) for reason, total in sorted(totals.items(), key=lambda kv: -kv[1])}


async def wait_for_stages(stack: Stack, stream: str, count: int, timeout: float = 600) -> None:
    """Until every service consuming `stream` in a group has handled `count`
    of its events (their /metrics)."""
    deadline = time.monotonic() + timeout
    while True:
        stack.check_alive()
        done = {s.name: sum(handled_by_partition(s.url, stream).values()) for s in stack.services
                if s.name in STAGES[stream]}
        if all(v >= count for v in done.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{stream} handled after {timeout:.0f}s: {done} (wanted {count} each)")
        await asyncio.sleep(0.5)


async def first_samples(stack: Stack, bus: Bus, nodes: list, rng: np.random.Generator) -> None:
    """Every node's first sample, published as its agent does after its
    topology, once the stages have read the topologies; back when they have
    read the samples too (with no stage running, at once)."""
    await wait_for_stages(stack, "node.topology", len(nodes))
    await publish_all(bus, [node_sample(n, datetime.now(timezone.utc), rng) for n in nodes])
    await wait_for_stages(stack, "node.metrics", len(nodes))


BATCHED = ("score.node", "node.allocatable")  # one event per partition for the samples in hand


async def nodes_per_event(bus: Bus, stream_name: str) -> float:
    """How many nodes' figures an event of `stream_name` held, on average, over the run."""
    events = nodes = 0
    async for _, event in bus.read(stream_name, StartAt.earliest()):
        events, nodes = events + 1, nodes + len(event.payload.items)
    return round(nodes / events, 2) if events else 0.0


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def drive(stack: Stack, args: argparse.Namespace, broker: tuple[int | None, str]) -> dict:
    rng = np.random.default_rng(args.seed)
    nodes = list(topologies(args.nodes, rng))
    common = dict(url=stack.bus_url, namespace=NAMESPACE, cluster=CLUSTER)
    # The cluster's actors, each its own process: the pods' creator, and every node's agent.
    creator = Actor(pods_job, count=args.pods, seed=args.seed, **common)
    agents = Actor(agents_job, nodes=args.nodes, mine=(0, args.nodes), seed=args.seed, interval_s=args.metrics_interval,
                   aligned=args.aligned_samples, **common) if args.metrics_interval > 0 else None
    async with Bus.from_url(stack.bus_url, namespace=NAMESPACE, cluster=CLUSTER, source="bench") as bus:
        t = time.perf_counter()
        await bus.ensure_streams()
        say(f"{args.nodes} nodes: topologies")
        await publish_all(bus, nodes)  # agents start: their inventory, then their first samples
        say("first samples")
        await first_samples(stack, bus, nodes, rng)
        decisions = Decisions()
        reader = asyncio.create_task(decisions.follow(bus))
        warmup = pods(1, np.random.default_rng(args.seed + 1), namespace="warmup")
        await publish_all(bus, warmup)
        await decisions.wait_for({warmup[0].event_key()}, timeout=300)
        for actor in (creator, agents):
            if actor is not None:
                await asyncio.to_thread(actor.wait_ready)
        setup_s = time.perf_counter() - t
        say(f"cluster ready in {setup_s:.0f}s; burst of {args.pods} pods")

        load_before = os.getloadavg()
        processes = [(s.name, s.process.pid) for s in stack.services] + [(broker[1], broker[0]),
                                                                          ("bench observer", os.getpid())]
        cpu_before = {pid: cpu_seconds(pid) for _, pid in processes}
        for actor in (agents, creator):
            if actor is not None:
                actor.go()
        sent = await asyncio.to_thread(creator.result)
        say(f"published in {sent['end'] - sent['start']:.1f}s")
        await decisions.wait_for(set(sent["times"]), timeout=args.timeout)
        load_after = os.getloadavg()
        rounds = 0
        if agents is not None:
            agents.stop()
            rounds = (await asyncio.to_thread(agents.result))["rounds"]
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        memory = [process_row(name, pid, cpu_before[pid], args.pods) for name, pid in processes]
        batching = {name: await nodes_per_event(bus, name) for name in BATCHED}

    start = sent["start"]
    first = {key: decisions.first[key] for key in sent["times"]}
    latency = [first[key][0] - at for key, at in sent["times"].items()]
    observer = [read_at - decided_at for read_at, _, decided_at in first.values()]
    end = max(read_at for read_at, _, _ in first.values())
    outcomes = [outcome for _, outcome, _ in first.values()]
    drain = end - start
    return {
        "bench": "burst", "bus": args.bus, "nodes": args.nodes, "pods": args.pods,
        "gpu_strategy": args.gpu_strategy, "metrics_interval_s": args.metrics_interval,
        "samples": ("aligned" if args.aligned_samples else "spread") if args.metrics_interval else None,
        "metric_rounds": rounds,
        "setup_s": round(setup_s, 1), "publish_s": round(sent["end"] - start, 2), "drain_s": round(drain, 2),
        **{f"decided_{q}pct_s": round(float(np.percentile([read_at - start for read_at, _, _ in first.values()], q)), 2)
           for q in (50, 90, 99)},
        "decisions_per_s": round(args.pods / drain, 1),
        "p50_ms": percentile_ms(latency, 50), "p99_ms": percentile_ms(latency, 99),
        "max_ms": percentile_ms(latency, 100), "observer_p50_ms": percentile_ms(observer, 50),
        "observer_p99_ms": percentile_ms(observer, 99),
        "placed": outcomes.count("placed"), "pending": outcomes.count("pending"),
        "held_back": sum(1 for key in first if key in decisions.filtered and not decisions.filtered[key]),
        "pending_filtered": pending_filtered([decisions.filtered[key] for key in first
                                              if decisions.filtered.get(key)]),
        "loadavg_1m": [round(load_before[0], 1), round(load_after[0], 1)],
        "nodes_per_event": batching,
        "memory": memory,
    }


def run(args: argparse.Namespace) -> dict:
    extra_env = {"TIDAL_PLACEMENT_GPU_STRATEGY": args.gpu_strategy, "TIDAL_PLACEMENT_BIND_TIMEOUT_S": "86400"}
    if not args.metrics_interval:  # no sample after the first round: staleness would refuse the late pods
        extra_env["TIDAL_PLACEMENT_NODE_STALE_AFTER_S"] = "0"
    with tempfile.TemporaryDirectory(prefix="tidal-burst-") as tmp:
        kafka = EmbeddedKafka(Path(tmp) / "kafka").start() if args.bus == "kafka" else None
        try:
            stack = Stack(Path(tmp) / "stack", bus_url=kafka.url if kafka else None, nats_port=0,
                          namespace=NAMESPACE, cluster=CLUSTER, services=SERVICES, extra_env=extra_env)
            with stack:
                stack.wait_ready(timeout=120)
                broker = (kafka.pid, "tansu (kafka)") if kafka else (stack.nats.pid, "nats-server")
                return asyncio.run(drive(stack, args, broker))
        finally:
            if kafka is not None:
                kafka.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--bus", choices=["nats", "kafka"], default="nats")
    parser.add_argument("--metrics-interval", type=float, default=10.0,
                        help="seconds between the simulated agents' samples of every node during the burst (0: none)")
    parser.add_argument("--aligned-samples", action="store_true",
                        help="every node samples at the same instant, a whole round at once (the worst case); "
                             "default: each node at its own phase, an even stream of samples")
    parser.add_argument("--strategy", "--gpu-strategy", dest="gpu_strategy", default=DEFAULT_STRATEGY,
                        help=f"placement's GPU strategy (default: the service's, {DEFAULT_STRATEGY})")
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up when the burst has not drained by then")
    parser.add_argument("--seed", type=int, default=0)
    collect_oldest_only_when_asked()  # the observer's collector, as the services': less of the machine
    result = run(parser.parse_args())
    sampling = (f"agents sampling every node every {result['metrics_interval_s']:g}s ({result['samples']}): "
                f"{result['metric_rounds']} rounds during the burst" if result["metrics_interval_s"]
                else "no agent samples during the burst")
    print(f"burst of {result['pods']:,} pods on {result['nodes']:,} nodes over {result['bus']} "
          f"({result['gpu_strategy']}, {sampling})")
    print(table([{"figure": k, "value": result[k]} for k in
                 ("publish_s", "drain_s", "decided_50pct_s", "decided_90pct_s", "decided_99pct_s", "decisions_per_s",
                  "p50_ms", "p99_ms", "max_ms", "observer_p50_ms", "observer_p99_ms", "placed", "pending",
                  "held_back", "setup_s", "loadavg_1m")] + [{"figure": f"nodes per {name} event", "value": per}
                                    for name, per in result["nodes_per_event"].items()]
                + [{"figure": f"pending, nodes filtered: {reason}", "value": nodes}
                   for reason, nodes in result["pending_filtered"].items()], ["figure", "value"]))
    print()
    print(table(result["memory"], ["process", "pid", "peak_rss_mib", "rss_now_mib", "cpu_s", "cpu_ms_per_pod"]))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
