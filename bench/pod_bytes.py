"""The bytes placement and oversell keep for each running pod of a cluster,
and where.

A cluster's pods run for hours, 30 a node, and both services keep each
while it runs; the placement benches hold pending pods only. This feeds
placement's own cache (`ClusterCache`) the events it reads of `--pods`
running pods on `--nodes` nodes, each decoded from its wire form as the
service decodes it, and counts what stays allocated (tracemalloc) once
they all run, by line of code; and oversell's table of the pods on each
node (`PodsByNode`) the same pods' events as they run:

- by default, pods bound and running before Tidal started, as the bridge
  reads them from the cluster (`tidal_bridge.pods.pod_lifecycle`);
- `--placed`: pods Tidal placed. They arrive pending, placement's
  scheduling cycle places them (its decisions read back from the log, as
  every replica reads them), and they run with the decision's annotations
  as the bridge's binder writes them (`decision_codec.write_decision`).

The pods are those of bench/cluster_pods.py (500m, 1 GiB, seven tenants),
which measures the processes' resident memory in the same cluster.

Prints one JSON line: {"pods": P, "nodes": N, "placed": bool, "bytes_per_pod": B,
"top": [["file:line", bytes a pod], ...], "oversell_bytes_per_pod": O}

Run: .venv/bin/python bench/pod_bytes.py [--pods 20000] [--nodes 1000] [--placed]
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
from pathlib import Path

import numpy as np

import _common
from cluster_pods import cluster_pods
from tidal_bridge import pod_lifecycle
from tidal_oversell import PodsByNode
from tidal_placement import ClusterCache
from tidal_placement import scheduling_cycle as cycle
from tidal_schemas import PlacementDecisions, decode, encode, make_envelope
from tidal_schemas.decision_codec import write_decision
from tidal_schemas.fence import fence_decision

CLUSTER, LEADER = "c1", "bench"
ROOT = Path(__file__).resolve().parent.parent


def wire(payload) -> bytes:
    return encode(make_envelope(payload, cluster=CLUSTER, source="bench"))


def read(cache: ClusterCache, payload, now: float) -> None:
    """`payload` as placement reads it: off the wire, decoded and validated."""
    event = decode(wire(payload))
    if isinstance(event.payload, PlacementDecisions):
        for decision in event.payload.items:
            cache.apply_decision(decision, LEADER, now)
    else:
        cache.apply(event.payload, now)


def where(frame: tracemalloc.Frame) -> str:
    path = Path(frame.filename).resolve()
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{frame.lineno}"


def run(pods: int, nodes: int, placed: bool, seed: int) -> dict:
    cluster = list(_common.topologies(nodes, np.random.default_rng(seed)))
    cache = ClusterCache(CLUSTER, permit_timeout_s=3600.0, stale_after_s=3600.0)
    for topology in cluster:
        read(cache, topology, 0.0)
    read(cache, PlacementDecisions(items=[fence_decision(1, LEADER)]), 0.0)
    manifests = cluster_pods(pods, [t.node for t in cluster], placed)
    gc.collect()
    tracemalloc.start()
    if placed:
        for manifest in manifests:
            read(cache, pod_lifecycle(manifest), 1.0)
        decisions = {d.event_key(): d for d in cycle(cache, None, 2.0) if d.outcome == "placed"}
        for key, decision in decisions.items():
            read(cache, PlacementDecisions(items=[decision]), 3.0)  # read back from the log
        for manifest in manifests:
            decision = decisions.get(f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}")
            if decision is not None:  # bound as the binder binds it, then started
                manifest["spec"]["nodeName"] = decision.node
                manifest["metadata"]["annotations"].update(write_decision(decision))
                manifest["status"].update(phase="Running", startTime=manifest["metadata"]["creationTimestamp"])
        running = len(decisions)
        del decisions
    else:
        running = pods
    for manifest in manifests:
        read(cache, pod_lifecycle(manifest), 4.0)
    del manifests
    gc.collect()
    kept = tracemalloc.take_snapshot()
    tracemalloc.stop()
    if running < pods:
        raise SystemExit(f"pod_bytes: only {running} of {pods} pods placed: give more --nodes")
    total = sum(stat.size for stat in kept.statistics("filename"))
    top = [[where(stat.traceback[0]), round(stat.size / pods)] for stat in kept.statistics("lineno")[:8]]
    return {"pods": pods, "nodes": nodes, "placed": placed, "bytes_per_pod": round(total / pods), "top": top}


def oversell_bytes(pods: int, nodes: int, seed: int) -> int:
    """What oversell's table of pods by node keeps of each running pod's
    event (placed by Tidal or not: it keeps the same of either). Measured
    with placement's cache gone: what the two would share (an interned
    string) would not be counted."""
    names = [t.node for t in _common.topologies(nodes, np.random.default_rng(seed))]
    events = [wire(pod_lifecycle(manifest)) for manifest in cluster_pods(pods, names, placed=False)]
    gc.collect()
    tracemalloc.start()
    by_node = PodsByNode()
    for event in events:
        by_node.apply(CLUSTER, decode(event).payload)
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return round(kept / pods)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20_000, help="running pods (default 20,000)")
    parser.add_argument("--nodes", type=int, default=1_000, help="nodes they run on (default 1,000)")
    parser.add_argument("--placed", action="store_true", help="pods Tidal placed (else bound before it started)")
    parser.add_argument("--seed", type=int, default=0, help="the nodes' inventories")
    args = parser.parse_args()
    figures = run(args.pods, args.nodes, args.placed, args.seed)
    figures["oversell_bytes_per_pod"] = oversell_bytes(args.pods, args.nodes, args.seed)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
