"""`tidal explain NAMESPACE/POD`: why a pod was placed where it was, or why
it is still pending, from the decision log."""

from __future__ import annotations

import argparse
import asyncio

from tidal_bus import StartAt
from tidal_schemas import PlacementDecision, PodLifecycle, SchemaError, resource_type
from tidal_schemas.fence import DecisionFence

from .errors import CliError
from .options import add_bus_options, bus_for


def add(subparsers) -> None:
    explain = subparsers.add_parser("explain", help="why a pod was placed where it was, or why it is pending",
                                    description="Read the decision log and print the latest decision that "
                                                "counts for the pod, with scores, filtered nodes and queue data.")
    explain.add_argument("pod", help="namespace/name (namespace defaults to 'default')")
    add_bus_options(explain)
    explain.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    namespace, _, name = args.pod.rpartition("/")
    namespace = namespace or "default"

    async def latest() -> tuple[PlacementDecision | None, PodLifecycle | None]:
        fence, found, pod = DecisionFence(), None, None
        async with bus_for(args, read_only=True) as bus:
            async for _, event in bus.read("placement.decision", StartAt.earliest()):
                if isinstance(event, SchemaError) or event.cluster != args.cluster:
                    continue
                for d in event.payload.items:
                    if fence.admit(d) and (d.namespace, d.name) == (namespace, name):
                        found = d
            if found is not None:  # the pod's own event says what it asked for
                async for _, event in bus.read("pod.lifecycle", StartAt.earliest()):
                    if not isinstance(event, SchemaError) and event.cluster == args.cluster \
                            and (event.payload.namespace, event.payload.name) == (namespace, name):
                        pod = event.payload
        return found, pod

    decision, pod = asyncio.run(latest())
    if decision is None:
        raise CliError(f"no decision for {namespace}/{name} in cluster {args.cluster} (is it pending on "
                       "a scheduler named tidal, and is placement running?)", exit_code=1)
    print(describe(decision, pod))
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
