"""`tidal explain NAMESPACE/POD`: why a pod was placed where it was, or why
it is still pending.

From the pod itself when the API server is asked (`--kubeconfig`,
`--context` or `--from api`), as `kubectl describe pod`: the decision the
bridge wrote on the pod with its Binding, and Tidal's Events about it
(`explain_pod`); a pending pod carries none, and with a bus given
(`--bus` or TIDAL_BUS_URL) the decision log says why.

From the decision log otherwise, in bounded time whatever its length: on
NATS from the broker's index (`decision_lookup`), on Kafka from the end of
the log's one partition back (`decision_tail`)."""

from __future__ import annotations

import argparse
import asyncio
import os

from tidal_schemas import PlacementDecision, PodLifecycle, resource_type

from .decision_lookup import DecisionLookup, Found
from .errors import CliError
from .options import add_bus_options, bus_for, count
from .output import add_output_option, emit

SCAN_LIMIT = 100_000
SOURCES = ("auto", "api", "log")


def add(subparsers) -> None:
    explain = subparsers.add_parser(
        "explain", help="why a pod was placed where it was, or why it is pending",
        description="From the pod itself (--kubeconfig, --context or --from api), as kubectl describe: the "
                    "decision written on it (node, NUMA CPUs, GPUs, decision id) and Tidal's Events about it; for "
                    "a pending pod, with a bus given (--bus or TIDAL_BUS_URL), also its latest decision in the log. "
                    "Otherwise from the decision log: the latest decision that counts for the pod, with scores, "
                    "filtered nodes and queue data, read back from the log's end (NATS: by the broker's index).")
    explain.add_argument("pod", help="namespace/name (namespace defaults to 'default')")
    explain.add_argument("--from", dest="source", choices=SOURCES, default="auto",
                         help="api: the pod from the API server; log: the decision log; auto (default): api when "
                              "--kubeconfig or --context is given, else log")
    explain.add_argument("--kubeconfig", metavar="FILE",
                         help="kubeconfig to reach the API server with (default as kubectl: $KUBECONFIG, else "
                              "~/.kube/config; in a pod, its service account)")
    explain.add_argument("--context", help="context of the kubeconfig (default: its current context)")
    explain.add_argument("--scan-limit", type=count, default=SCAN_LIMIT, metavar="EVENTS",
                         help=f"decision events to look back through at most (default {SCAN_LIMIT}; 0: no limit)")
    add_output_option(explain)
    add_bus_options(explain)
    explain.set_defaults(func=run, bus=None)  # None: not given (a pending pod's API answer then ends there)


async def lookup(bus, cluster: str, namespace: str, name: str, scan_limit: int = SCAN_LIMIT) -> Found:
    """The pod's latest decision that counts: from the index where the
    broker has one (NATS), else from the end of the log back (Kafka)."""
    from tidal_bus.keyed_read import indexed

    if indexed(bus):
        return await DecisionLookup(bus, cluster, namespace, name, scan_limit).find()
    from .decision_tail import TailLookup

    return await TailLookup(bus, cluster, namespace, name, scan_limit).find()


def run(args: argparse.Namespace) -> int:
    from tidal_runtime.settings import DEFAULT_BUS_URL

    namespace, _, name = args.pod.rpartition("/")
    namespace = namespace or "default"
    bus_given = args.bus is not None or "TIDAL_BUS_URL" in os.environ
    args.bus = args.bus or os.environ.get("TIDAL_BUS_URL", DEFAULT_BUS_URL)
    source = args.source
    if source == "auto":
        source = "api" if args.kubeconfig or args.context else "log"
    if source == "api":
        return run_api(args, namespace, name, bus_given)
    found = asyncio.run(find(args, namespace, name))
    document = log_document(args, found, namespace, name)
    emit(args, document, lambda: describe(found.decision, found.pod))
    return 0


async def find(args: argparse.Namespace, namespace: str, name: str) -> Found:
    async with bus_for(args, read_only=True) as bus:
        return await lookup(bus, args.cluster, namespace, name, args.scan_limit)


def log_document(args: argparse.Namespace, found: Found, namespace: str, name: str) -> dict:
    """The log's answer as a document; CliError (exit 1) when it has none."""
    decision, pod = found.decision, found.pod
    if decision is None:
        where = "" if found.complete else f" in the last {args.scan_limit} decision events (--scan-limit 0: all)"
        raise CliError(f"no decision for {namespace}/{name} in cluster {args.cluster}{where} (is it pending on "
                       "a scheduler named tidal, and is placement running?)", exit_code=1)
    return {"cluster": args.cluster, "decision": decision.model_dump(mode="json"),
            "resource_type": resource_type(pod) if pod is not None else None}


def run_api(args: argparse.Namespace, namespace: str, name: str, bus_given: bool) -> int:
    """The pod from the API server; pending, and a bus given, the log too."""
    from .explain_pod import describe_pod, read_pod

    view = asyncio.run(read_pod(args.kubeconfig, args.context, namespace, name))
    document = {"source": "api", "pod": view.document(), "log": None}
    table = describe_pod(view)
    if view.pending and bus_given:
        found = asyncio.run(find(args, namespace, name))
        if found.decision is not None:
            document["log"] = log_document(args, found, namespace, name)
            table += "\nfrom the decision log:\n" + describe(found.decision, found.pod)
        else:
            table += f"\nno decision for {namespace}/{name} in the decision log of cluster {args.cluster}" \
                     + ("" if found.complete else f" in the last {args.scan_limit} decision events")
    elif view.pending:
        table += "\n  (give --bus to read its latest decision from the decision log)"
    emit(args, document, lambda: table)
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
