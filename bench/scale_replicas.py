"""Throughput of the per-node stages at 1, 2 and 4 replicas, each replica
its own process in one consumer group, over the embedded NATS (or Kafka).

Stages (the `node.metrics` consumers, whose replicas split the node keys):
  scoring       node.metrics -> score.node (one event per partition for the samples in hand)
  oversell      node.metrics (+ node.topology) -> node.allocatable (one event per partition for the samples in hand)
  remediation   node.metrics (+ node.topology) -> hotspot check (publishes only on a hotspot)
  metrics-path  the agents' side too: k agent processes build every node's
                sample with the agent's own code (tidal_topology.sampling)
                and publish it, k scoring replicas consume it

For each stage and replica count: a fresh namespace; the nodes' topologies
(stages that need them); k replicas started and their split settled (read
from their logs); then `--rounds` samples of each of `--nodes` nodes are
published from a separate process (pre-built, so publishing costs little;
the metrics path builds them live in k agent processes) as fast as the
broker acks, and the replicas' /metrics are polled until every event is
handled. events/s = events / (first publish -> last handled). Each
replica's row shows the partitions it owns (its log), the partitions it
handled events of (tidal_partition_events_handled_total) and its CPU time.
With 2+ replicas, the replica owning the most partitions is then killed
(SIGKILL) and one more round is published: the survivors' rows show its
partitions handled by them.

The machine's cores bound the result: every replica, the publisher and the
broker share them, so replicas beyond the core count add no throughput.

Run: .venv/bin/python bench/scale_replicas.py [--stages scoring oversell remediation metrics-path]
         [--replicas 1 2 4] [--nodes 2000] [--rounds 10] [--bus nats|kafka] [--no-kill]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    Actor, agents_job, cpu_seconds, handled_by_partition, owned_partitions, publish_all, table, topologies,
)

from tidal_bus import Bus  # noqa: E402
from tidal_bus.embedded import EmbeddedKafka, EmbeddedNats  # noqa: E402
from tidal_cli import Stack  # noqa: E402
from tidal_schemas.streams import stream  # noqa: E402

CLUSTER = "bench"
PARTITIONS = stream("node.metrics").partitions
STAGES = {  # stage -> (service, needs topologies, agents build samples live)
    "scoring": ("scoring", False, False),
    "oversell": ("oversell", True, False),
    "remediation": ("remediation", True, False),
    "metrics-path": ("scoring", False, True),
}


def run_agents(url: str, namespace: str, args: argparse.Namespace, count: int, live: bool, rounds: int) -> dict:
    """`count` agent processes sharing the nodes, started together; their
    first publish, last ack and events."""
    cuts = np.linspace(0, args.nodes, count + 1).astype(int)
    actors = [Actor(agents_job, url=url, namespace=namespace, cluster=CLUSTER, nodes=args.nodes,
                    mine=(int(cuts[i]), int(cuts[i + 1])), seed=args.seed, rounds=rounds, live=live)
              for i in range(count)]
    for a in actors:
        a.wait_ready()
    for a in actors:
        a.go()
    done = [a.result() for a in actors]
    return {"start": min(d["start"] for d in done), "end": max(d["end"] for d in done),
            "events": sum(d["events"] for d in done), "cpu_s": round(sum(d["cpu_s"] for d in done), 1)}


# -- the replicas ----------------------------------------------------------------------
class Replicas:
    """k processes of one service in one group (a Stack each, on a shared broker)."""

    def __init__(self, root: Path, url: str, namespace: str, service: str, count: int) -> None:
        self.stacks = [Stack(root / f"replica-{i}", bus_url=url, namespace=namespace, cluster=CLUSTER,
                             services=[service]) for i in range(count)]

    def __enter__(self) -> "Replicas":
        for s in self.stacks:
            s.start()
        for s in self.stacks:
            s.wait_ready(timeout=120)
        return self

    def __exit__(self, *exc: object) -> None:
        for s in self.stacks:
            s.stop()

    @property
    def services(self):
        return [s.services[0] for s in self.stacks]

    def alive(self) -> list[int]:
        return [i for i, s in enumerate(self.services) if s.process.poll() is None]

    def owned(self) -> dict[int, frozenset[int] | None]:
        return {i: owned_partitions(self.services[i].log_path, "node.metrics") for i in self.alive()}

    def handled(self, stream_name: str = "node.metrics") -> dict[int, Counter]:
        return {i: handled_by_partition(self.services[i].url, stream_name) for i in self.alive()}

    def cpu(self) -> dict[int, float | None]:
        return {i: cpu_seconds(self.services[i].process.pid) for i in self.alive()}

    def wait_split(self, timeout: float = 120.0, settle: float = 2.5) -> float:
        """Until the live replicas' owned partitions are disjoint, cover the
        stream and have not changed for `settle` s; the seconds it took."""
        start = time.monotonic()
        deadline, last, since = start + timeout, None, start
        while True:
            owned = self.owned()
            parts = [p for p in owned.values() if p]
            ok = sum(map(len, parts)) == PARTITIONS and len(frozenset().union(*parts)) == PARTITIONS
            if owned != last:
                last, since = owned, time.monotonic()
            if ok and time.monotonic() - since >= settle:
                return round(since - start, 1)
            if time.monotonic() > deadline:
                raise TimeoutError(f"replicas did not split the partitions in {timeout:.0f}s: {owned}")
            time.sleep(0.2)

    def wait_handled(self, total: int, base: dict[int, Counter] | None = None, stream_name: str = "node.metrics",
                     timeout: float = 1800.0) -> tuple[float, dict[int, Counter]]:
        """Until the live replicas have handled `total` more events than
        `base`; (when, the counts)."""
        deadline = time.monotonic() + timeout
        while True:
            counts = self.handled(stream_name)
            done = sum(sum((c - (base or {}).get(i, Counter())).values()) for i, c in counts.items())
            if done >= total:
                return time.time(), counts
            if time.monotonic() > deadline:
                raise TimeoutError(f"{done} of {total} {stream_name} events handled after {timeout:.0f}s")
            time.sleep(0.2)


def _parts(counter: Counter) -> str:
    return ",".join(str(p) for p in sorted(p for p, n in counter.items() if n > 0)) or "-"


async def _publish_topologies(url: str, namespace: str, nodes: int, seed: int) -> None:
    async with Bus.from_url(url, namespace=namespace, cluster=CLUSTER, source="agents") as bus:
        await bus.ensure_streams()
        await publish_all(bus, topologies(nodes, np.random.default_rng(seed)))


async def _ensure_streams(url: str, namespace: str) -> None:
    async with Bus.from_url(url, namespace=namespace, cluster=CLUSTER, source="bench") as bus:
        await bus.ensure_streams()


def run_stage(stage: str, k: int, url: str, root: Path, args: argparse.Namespace) -> dict:
    service, needs_topology, live = STAGES[stage]
    namespace = f"{stage}-{k}-{int(time.time()) % 100000}"
    if needs_topology:
        asyncio.run(_publish_topologies(url, namespace, args.nodes, args.seed))
    else:
        asyncio.run(_ensure_streams(url, namespace))
    with Replicas(root / namespace, url, namespace, service, k) as replicas:
        split_s = replicas.wait_split()
        if needs_topology:
            replicas.wait_handled(args.nodes, stream_name="node.topology")
        cpu0 = replicas.cpu()
        sent = run_agents(url, namespace, args, k if live else 1, live, args.rounds)
        start, published, events = sent["start"], sent["end"], sent["events"]
        end, counts = replicas.wait_handled(events)
        cpu1 = replicas.cpu()
        owned = replicas.owned()
        rows = [{"replica": i, "owns": ",".join(map(str, sorted(owned[i] or []))) or "-",
                 "handled_partitions": _parts(counts[i]), "events": sum(counts[i].values()),
                 "share": f"{sum(counts[i].values()) / max(events, 1):.0%}",
                 "cpu_s": round((cpu1[i] or 0) - (cpu0[i] or 0), 1),
                 "cpu_ms_per_event": round(((cpu1[i] or 0) - (cpu0[i] or 0)) * 1000 / sum(counts[i].values()), 2)
                 if sum(counts[i].values()) else "-"} for i in sorted(counts)]
        result = {"bench": "scale_replicas", "bus": args.bus, "stage": stage, "service": service, "replicas": k,
                  "agent_processes": k if live else 1, "nodes": args.nodes, "events": events,
                  "publish_s": round(published - start, 2), "publisher_cpu_s": sent["cpu_s"],
                  "drain_s": round(end - start, 2),
                  "events_per_s": round(events / (end - start), 1), "split_settled_s": split_s,
                  "loadavg_1m": round(os.getloadavg()[0], 1),
                  "per_replica": rows}
        if k > 1 and args.kill:
            result["after_kill"] = kill_one(replicas, url, namespace, args)
    return result


def kill_one(replicas: Replicas, url: str, namespace: str, args: argparse.Namespace) -> dict:
    """SIGKILL the replica owning the most partitions, wait for the survivors
    to cover them, publish one more round, and say which survivor handled
    which of its partitions."""
    owned = replicas.owned()
    index = max(owned, key=lambda i: len(owned[i] or ()))
    victim, lost = replicas.services[index], owned[index] or frozenset()
    before = replicas.handled()
    victim.process.kill()
    victim.process.wait()
    killed = time.monotonic()
    replicas.wait_split(settle=0.0)
    takeover_s = round(time.monotonic() - killed, 1)
    events = run_agents(url, namespace, args, 1, False, 1)["events"]
    _, counts = replicas.wait_handled(events, base={i: before[i] for i in replicas.alive()})
    owned = replicas.owned()
    rows = [{"replica": i, "owns": ",".join(map(str, sorted(owned[i] or []))) or "-",
             "handled_partitions": _parts(counts[i] - before[i]),
             "took_over": _parts(Counter({p: n for p, n in (counts[i] - before[i]).items() if p in lost})),
             "events": sum((counts[i] - before[i]).values())} for i in sorted(counts)]
    return {"killed": index, "its_partitions": sorted(lost), "takeover_s": takeover_s, "events": events,
            "survivors": rows}


def report(result: dict) -> None:
    print(f"\n{result['stage']} x{result['replicas']} ({result['service']}, {result['agent_processes']} agent "
          f"process(es), {result['bus']}): {result['events']:,} events of {result['nodes']:,} nodes in "
          f"{result['drain_s']} s = {result['events_per_s']:,} events/s (published in {result['publish_s']} s, "
          f"{result['publisher_cpu_s']} s of publisher CPU; load average {result['loadavg_1m']})")
    print(table(result["per_replica"], ["replica", "owns", "handled_partitions", "events", "share", "cpu_s",
                                        "cpu_ms_per_event"]))
    kill = result.get("after_kill")
    if kill:
        print(f"killed replica {kill['killed']} (SIGKILL; partitions {kill['its_partitions']}); the survivors own "
              f"them {kill['takeover_s']} s later; one more round of {kill['events']:,} events:")
        print(table(kill["survivors"], ["replica", "owns", "handled_partitions", "took_over", "events"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES))
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10, help="samples of every node")
    parser.add_argument("--bus", choices=["nats", "kafka"], default="nats")
    parser.add_argument("--no-kill", dest="kill", action="store_false", help="skip killing a replica")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    summary = []
    with tempfile.TemporaryDirectory(prefix="tidal-scale-") as tmp:
        root = Path(tmp)
        broker = (EmbeddedKafka(root / "kafka") if args.bus == "kafka" else EmbeddedNats(root / "nats")).start()
        try:
            for stage in args.stages:
                for k in args.replicas:
                    result = run_stage(stage, k, broker.url, root, args)
                    report(result)
                    print(json.dumps(result), flush=True)
                    summary.append({"stage": stage, "replicas": k, "events/s": result["events_per_s"],
                                    "drain_s": result["drain_s"], "load": result["loadavg_1m"],
                                    "cpu ms/event": round(1000 * sum(r["cpu_s"] for r in result["per_replica"])
                                                          / result["events"], 2),
                                    "events per replica": " / ".join(str(r["events"]) for r in result["per_replica"])})
        finally:
            broker.stop()
    print("\nsummary")
    print(table(summary, ["stage", "replicas", "events/s", "drain_s", "cpu ms/event", "load", "events per replica"]))


if __name__ == "__main__":
    main()
