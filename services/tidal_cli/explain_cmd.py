"""`tidal explain NAMESPACE/POD`: why a pod was placed where it was, or why
it is still pending, from the decision log: on NATS from the broker's index
(the pod's own events, the fences, a bounded scan back to its decision:
`decision_lookup`), so the answer costs the same whatever the log's length;
on Kafka, which has no such index, from the whole log."""

from __future__ import annotations

import argparse
import asyncio

from tidal_schemas import PlacementDecision, PodLifecycle, resource_type

from .decision_lookup import DecisionLookup, Found, read_whole_log
from .errors import CliError
from .options import add_bus_options, bus_for, count
from .output import add_output_option, emit

SCAN_LIMIT = 100_000


def add(subparsers) -> None:
    explain = subparsers.add_parser("explain", help="why a pod was placed where it was, or why it is pending",
                                    description="Find the latest decision that counts for the pod in the decision "
                                                "log and print it, with scores, filtered nodes and queue data.")
    explain.add_argument("pod", help="namespace/name (namespace defaults to 'default')")
    explain.add_argument("--scan-limit", type=count, default=SCAN_LIMIT, metavar="EVENTS",
                         help=f"decision events to look back through at most (default {SCAN_LIMIT}; 0: no limit)")
    add_output_option(explain)
    add_bus_options(explain)
    explain.set_defaults(func=run)


async def lookup(bus, cluster: str, namespace: str, name: str, scan_limit: int = SCAN_LIMIT) -> Found:
    """The pod's latest decision that counts, from the index where the broker has one."""
    from tidal_bus.keyed_read import indexed

    if indexed(bus):
        return await DecisionLookup(bus, cluster, namespace, name, scan_limit).find()
    return await read_whole_log(bus, cluster, namespace, name)


def run(args: argparse.Namespace) -> int:
    namespace, _, name = args.pod.rpartition("/")
    namespace = namespace or "default"

    async def find() -> Found:
        async with bus_for(args, read_only=True) as bus:
            return await lookup(bus, args.cluster, namespace, name, args.scan_limit)

    found = asyncio.run(find())
    decision, pod = found.decision, found.pod
    if decision is None:
        where = "" if found.complete else f" in the last {args.scan_limit} decision events (--scan-limit 0: all)"
        raise CliError(f"no decision for {namespace}/{name} in cluster {args.cluster}{where} (is it pending on "
                       "a scheduler named tidal, and is placement running?)", exit_code=1)
    document = {"cluster": args.cluster, "decision": decision.model_dump(mode="json"),
                "resource_type": resource_type(pod) if pod is not None else None}
    emit(args, document, lambda: describe(decision, pod))
    return 0


def describe(d: PlacementDecision, pod: PodLifecycle | None = None) -> str:
    """The decision as an operator reads it; with the pod's event, also the
    resource type it competes for (its fair-share score and waiting queue)."""
    lines = [f"pod {d.namespace}/{d.name}: {d.outcome.upper()}"
             + (f" on {d.node}" if d.node else "") + f"  (decision {d.decision_id}, leader epoch {d.epoch})"]
    if pod is not None:
        lines.append(f"  resource type: {resource_type(pod)}")
    if d.outcome == "placed":
        if d.numa_cpus:
            lines.append("  exclusive CPUs per NUMA node: "
                         + ", ".join(f"numa{k}={v}" for k, v in sorted(d.numa_cpus.items())))
        if d.numa_nodes:
            lines.append(f"  NUMA nodes: {d.numa_nodes}")
        if d.gpus:
            lines.append("  GPUs: " + ", ".join(f"{g.gpu} ({g.model or '?'}, {g.milli}m)" for g in d.gpus))
        if d.chosen:
            lines.append("  score: " + ", ".join(f"{k}={v:.4g}" for k, v in d.chosen.breakdown.items()))
        for r in d.runners_up:
            lines.append(f"  runner-up {r.node}: {r.score:.4g}")
    else:
        lines.append(f"  why: {d.reason or 'unknown'}")
    if d.filtered:
        lines.append("  nodes filtered out: " + ", ".join(f"{n} {why}" for why, n in
                                                           sorted(d.filtered.items(), key=lambda kv: -kv[1])))
    if d.queue_position is not None:
        lines.append(f"  queue position: {d.queue_position}")
    if d.fair_share_score is not None:
        lines.append(f"  owner's fair-share score: {d.fair_share_score:.4g}")
    return "\n".join(lines)
