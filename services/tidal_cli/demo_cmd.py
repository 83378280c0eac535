"""`tidal demo`: the whole pipeline on the embedded default against a small
simulated cluster (`sample.py`), and a summary of what flowed through every
stage.

The cluster is played by the simulator, behind its Kubernetes API server,
with the node agent's own code on every simulated machine; the real bridge,
a process of the stack like every service, reads it through the kubeconfig
the simulator writes into the data dir and is the only publisher of pod
lifecycle events and bind results — as in `tidal simulate`. The auditor
checks the run's streams at the end: any violation fails the demo."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from collections import Counter
from pathlib import Path

from tidal_bus import Bus, StartAt
from tidal_clock import elapsed
from tidal_schemas import PlacementDecision, SchemaError
from tidal_schemas.fence import DecisionFence
from tidal_schemas.streams import STREAMS

from .errors import CliError
from .options import seconds
from .services import available, load
from .stack import Stack

SERVICES = ("placement", "scoring", "oversell", "remediation")
# What the simulated cluster must have shown besides the services' own streams:
# its machines (inventory, usage, the agents' exclusive CPUs) and, through the
# bridge, its pods and binds.
CLUSTER_STREAMS = {"node.topology", "node.metrics", "cpu.assignment", "pod.lifecycle", "bind.result"}


def add(subparsers) -> None:
    demo = subparsers.add_parser(
        "demo", help="run the pipeline on a sample simulated cluster and print a summary",
        description="Start an embedded nats-server, the services and the bridge; simulate a small cluster behind "
                    "a Kubernetes API server (kubeconfig in --data-dir); wait until every stage has produced its "
                    "events; audit the run; print a summary; stop everything.")
    demo.add_argument("--data-dir", type=Path, default=Path(".tidal/demo"), help="wiped at start")
    demo.add_argument("--timeout", type=seconds, default=90.0, help="seconds to wait for every stage")
    demo.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from tidal_simulator.bridge import stack_bridge
    from tidal_simulator.report_text import node_agents_line

    from .simulate_cmd import ACTIONS_ENABLED

    started = elapsed()
    shutil.rmtree(args.data_dir, ignore_errors=True)
    services = [s for s in SERVICES if s in available()]
    if "placement" not in services:
        raise CliError("the placement service is not installed in this tidal (not in the service registry)",
                       exit_code=1)
    # Short periods so a demo of a minute shows several rounds of every stage; the simulated
    # cluster's actions carried out (a real cluster's start dry-run).
    demo_env = {**ACTIONS_ENABLED, "TIDAL_SCORING_PERIOD_S": "1", "TIDAL_LOG_LEVEL": "WARNING"}
    plan = _plan(args.data_dir)
    with Stack(args.data_dir, nats_port=0, namespace="demo", cluster="demo", services=services,
               extra_env=demo_env) as stack:
        stack.wait_ready()
        print(stack.describe(), flush=True)
        plan.settings = plan.settings.model_copy(update={"bus_url": stack.bus_url})
        print(f"the simulated cluster: kubectl --kubeconfig {plan.settings.kubeconfig} get pods -A -o wide",
              flush=True)
        expected = {stream for s in stack.services for stream in load(s.name).produces} | CLUSTER_STREAMS
        result, counts, invalid, sources, decisions = asyncio.run(
            _simulate_and_watch(stack, plan, stack_bridge(stack), expected, args.timeout))
        stack.check_alive()
    _print_decisions(decisions)
    _print_summary(counts, invalid, sources, expected, ["simulator", "bridge", *services],
                   elapsed() - started)
    print(f"invariant violations: {result.violations}")
    for line in result.report["invariants"]["lines"][:10]:
        print(f"  {line}")
    agents = result.report["node_agents"]
    print(node_agents_line(agents))
    missing = sorted(s for s in expected if not counts.get(s))
    if missing:
        raise CliError(f"no events on {', '.join(missing)} within {args.timeout:.0f}s "
                       f"(logs in {args.data_dir}/logs)", exit_code=1)
    if result.violations:
        print(f"tidal: {result.violations} invariant violation(s); `tidal audit` lists them", file=sys.stderr)
        return 1
    if any(agents["audit_violations"].values()):
        print(f"tidal: the simulated nodes' agents found violations in their own audits: {node_agents_line(agents)}",
              file=sys.stderr)
        return 1
    return 0


def _plan(data_dir: Path):
    from tidal_simulator.run import RunPlan
    from tidal_simulator.settings import SimulatorSettings

    from .sample import sample_workload

    settings = SimulatorSettings(namespace="demo", cluster="demo", http_host="127.0.0.1", http_port=0, autorun=False,
                                 log_level="WARNING", expect_allocatable=True, data_dir=str(data_dir),
                                 kubeconfig=str(data_dir / "kubeconfig"))
    return RunPlan(sample_workload(), settings)


async def _simulate_and_watch(stack: Stack, plan, bridge, expected: set[str], timeout: float):
    from tidal_simulator.run import simulate

    from .simulate_cmd import _metrics_warmup

    deadline = elapsed() + timeout
    result = await asyncio.wait_for(simulate(plan, warmup=_metrics_warmup(stack, len(plan.workload.nodes)),
                                             progress=lambda line: None, bridge=bridge), timeout)
    async with Bus.from_url(stack.bus_url, namespace=stack.namespace, cluster=stack.cluster, source="demo") as bus:
        while True:  # the scoring periods run on the wall clock: wait for their rounds too
            counts, invalid, sources = await _count(bus)
            if all(counts.get(s) for s in expected) or elapsed() > deadline:
                return result, counts, invalid, sources, await _decisions(bus)
            await asyncio.sleep(0.5)


async def _decisions(bus: Bus) -> dict[str, PlacementDecision]:
    """The latest decision that counts for each pod."""
    fence, latest = DecisionFence(), {}
    async for _, event in bus.read("placement.decision", StartAt.earliest()):
        for d in () if isinstance(event, SchemaError) else event.payload.items:
            if fence.admit(d) and d.outcome != "fence":
                latest[d.event_key()] = d
    return latest


def _print_decisions(decisions: dict[str, PlacementDecision]) -> None:
    if not decisions:
        return
    print("\npod                        decision")
    for key, d in sorted(decisions.items()):
        if d.outcome == "placed":
            what = f"{d.node}"
            if d.numa_cpus:
                what += "  cpus " + "+".join(f"numa{k}:{v}" for k, v in sorted(d.numa_cpus.items()))
            if d.gpus:
                what += "  gpus " + ",".join(f"{g.gpu}({g.milli}m)" for g in d.gpus)
        else:
            what = f"pending: {d.reason}"
        print(f"{key:<26} {what}")


async def _count(bus: Bus) -> tuple[Counter, int, dict[str, set[str]]]:
    """Events per stream, undecodable events, and who published on each stream."""
    counts: Counter = Counter()
    invalid, sources = 0, {}
    for name in STREAMS:
        async for _, event in bus.read(name, StartAt.earliest()):
            if isinstance(event, SchemaError):
                invalid += 1
            else:
                counts[name] += 1
                sources.setdefault(name, set()).add(event.source)
    return counts, invalid, sources


def _print_summary(counts: Counter, invalid: int, sources: dict[str, set[str]], expected: set[str],
                   services: list[str], seconds: float) -> None:
    publishers = {name: ", ".join(sorted(sources.get(name, ()))) or "-" for name in STREAMS}
    width = max(28, *(len(who) for who in publishers.values()))
    print("\nstream               events  published by")
    for name in STREAMS:
        mark = "expected" if name in expected else ""
        print(f"{name:<20} {counts.get(name, 0):>6}  {publishers[name]:<{width}} {mark}".rstrip())
    print(f"\nparts: {', '.join(services)}; undecodable: {invalid}; "
          f"dead letters: {counts.get('dead.letter', 0)}; took {seconds:.1f}s")
