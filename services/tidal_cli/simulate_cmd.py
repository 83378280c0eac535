"""`tidal simulate`: run the real services (placement, scoring, oversell,
remediation and the bridge) on an embedded NATS, or over `--bus`, against
the simulator — a stand-in cluster in this process, behind a Kubernetes API
server on localhost that the real bridge connects to through the kubeconfig
written to DATA_DIR/kubeconfig (`kubectl --kubeconfig DATA_DIR/kubeconfig
get pods -o wide` shows the cluster while it runs) — fed by an openb trace,
a scenario file or the synthetic generator; write a JSON report and an HTML
page. With `--bus`, the bridge runs in this process.

Exit codes: 0 done (every expectation met, no invariant violated), 1 a
failure, an expectation not met or an invariant violated, 2 bad input (one line naming the file, flag or field)."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path

from tidal_bus.auth import redact_url
from tidal_clock import elapsed

from .errors import CliError
from .simulate_workload import read_workload
from .options import cluster_name, count, make_dir, namespace_name, number, seconds, seconds_or_zero, write_file

# The webhook is part of the default path, as in a deployment: without it no node is oversold.
DEFAULT_SERVICES = "placement,scoring,oversell,remediation,webhook"
# The simulated cluster is the simulator's own: the services started for it carry out every action,
# which on a real cluster start dry-run (docs/operations.md; examples/demo/actions.yaml is the same as a file).
ACTIONS_ENABLED = {"TIDAL_OVERSELL_EVICT": "enabled", "TIDAL_REMEDIATION_FREEZE": "enabled",
                   "TIDAL_REMEDIATION_MIGRATE": "enabled"}


def add(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate", help="run the pipeline against a simulated cluster and report",
        description="Start an embedded nats-server and the services (or use --bus), simulate a cluster from an "
                    "openb trace (--nodes/--pods), a scenario file (--scenario) or the generator (--synthetic), "
                    "and report GPU allocation vs arrived load, fragmentation, CPU use, pending pods, decision "
                    "rate and latency, fair-share fairness and the actions taken.")
    source = p.add_argument_group("workload (one of)")
    source.add_argument("--nodes", type=Path, help="openb node CSV (sn,cpu_milli,memory_mib,gpu,model)")
    source.add_argument("--pods", type=Path, help="openb pod CSV (5 or 11 columns)")
    source.add_argument("--scenario", type=Path, help="scenario YAML (nodes, pods, usage, expectations)")
    source.add_argument("--synthetic", metavar="K=V,...", nargs="?", const="",
                        help="the seeded generator, e.g. nodes=20,pods=200,tenants=3")
    p.add_argument("--seed", type=number(0, 2**32 - 1, integer=True), default=42, help="shuffle/inflation, usage noise and bind failures")
    p.add_argument("--arrive-only", action="store_true",
                   help="GPU-fragmentation protocol: shuffled arrivals, nothing departs")
    p.add_argument("--inflate", type=number(0, 1000, above=True), default=None,
                   help="arrive-only: add sampled pods until GPU requests reach X × capacity (default 1.3)")
    p.add_argument("--tenants", type=number(1, 10**6, integer=True), default=4, help="openb traces: tenants the pods are spread over")
    p.add_argument("--usage-level", type=number(0, 100), default=0.5, help="openb traces: used fraction of requests")
    p.add_argument("--gpu-strategy", help="placement's GPU strategy (best-fit, fgd, fgd-cpu)")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument("--html", type=Path, help="write the HTML report here")
    p.add_argument("--limit", type=count, help="release only the first N pods of the arrival order")
    p.add_argument("--bind-failure-rate", type=number(0, 1), default=0.0, help="share of binds refused (0..1)")
    p.add_argument("--batch", type=number(1, 10**6, integer=True), default=1, help="pods released together before waiting")
    p.add_argument("--progress", type=count, default=500, help="a line on stderr every N pods (0 = none)")
    p.add_argument("--decision-timeout", type=seconds, default=30.0, help="seconds to wait for a pod's decision")
    p.add_argument("--tick", type=seconds, help="scenario seconds per tick (default: the workload's)")
    p.add_argument("--real-time", action="store_true", help="scenario time runs with the wall clock")
    p.add_argument("--services", default=DEFAULT_SERVICES, help="services to start on the embedded stack")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting for the started services, e.g. TIDAL_OVERSELL_STOP_THRESHOLD=0.8 (they "
                        "evict, freeze and migrate for real: TIDAL_OVERSELL_EVICT=dry-run shows the default)")
    p.add_argument("--data-dir", type=Path, default=Path(".tidal/simulate"), help="embedded stack (wiped at start)")
    p.add_argument("--bus", help="use the services running on this bus instead of starting them")
    p.add_argument("--namespace", type=namespace_name, default="sim", help="stream namespace (the services' TIDAL_NAMESPACE)")
    p.add_argument("--cluster", type=cluster_name, default="sim", help="cluster id (the services' TIDAL_CLUSTER)")
    p.add_argument("--warmup", type=seconds_or_zero, default=2.0,
                   help="--bus: seconds for the services to take in the cluster before pods arrive")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    plan = build_plan(args)
    for option, path in (("--report", args.report), ("--html", args.html)):
        if path is not None:  # refused now, not after the whole run
            make_dir(path.parent, option)
    from tidal_simulator.report_text import node_agents_line, summary
    from tidal_simulator.run import simulate

    started = elapsed()
    if args.bus:
        result = asyncio.run(simulate(plan, warmup=_grace(args.warmup)))
    else:
        result = _run_embedded(args, plan, simulate)
    _write(args, result)
    print(summary(result.report, elapsed() - started))
    if result.violations:
        print(f"tidal: {result.violations} invariant violation(s); `tidal audit` lists them", file=sys.stderr)
        return 1
    agents = result.report["node_agents"]
    if any(agents["audit_violations"].values()):
        print(f"tidal: the simulated nodes' agents found violations in their own audits: {node_agents_line(agents)}",
              file=sys.stderr)
        return 1
    if result.failed_expectations:
        failed = [e["expect"] for e in result.report["expectations"] if not e["ok"]]
        print(f"tidal: {len(failed)} of {len(result.report['expectations'])} expectations not met: "
              f"{'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def build_plan(args: argparse.Namespace):
    """Validate the flags and read the workload; CliError (exit 2) naming the problem."""
    chosen = [name for name, given in (("--nodes/--pods", args.nodes or args.pods), ("--scenario", args.scenario),
                                       ("--synthetic", args.synthetic is not None)) if given]
    if len(chosen) != 1:
        raise CliError("give one workload: --nodes and --pods, --scenario or --synthetic"
                       + (f" (got {', '.join(chosen)})" if chosen else ""))
    if (args.nodes is None) != (args.pods is None):
        raise CliError("--nodes and --pods go together")
    for flag, value, ok in (("--inflate", args.inflate, args.inflate is None or args.inflate > 0),
                            ("--bind-failure-rate", args.bind_failure_rate, 0 <= args.bind_failure_rate <= 1),
                            ("--batch", args.batch, args.batch >= 1), ("--tenants", args.tenants, args.tenants >= 1),
                            ("--tick", args.tick, args.tick is None or args.tick > 0),
                            ("--limit", args.limit, args.limit is None or args.limit >= 0)):
        if not ok:
            raise CliError(f"{flag}: {value} is out of range")
    if args.gpu_strategy is not None:
        from tidal_placement.gpu_strategies import GPU_STRATEGIES

        if args.gpu_strategy not in GPU_STRATEGIES:
            raise CliError(f"--gpu-strategy: unknown {args.gpu_strategy!r}; known: {', '.join(sorted(GPU_STRATEGIES))}")
    extra = {"gpu_strategy": args.gpu_strategy}
    workload, order, shapes, reference = read_workload(args)
    from tidal_simulator.run import RunPlan
    from tidal_simulator.settings import SimulatorSettings

    if args.arrive_only and not args.nodes:
        order = [p.key for p in sorted(workload.pods, key=lambda p: (p.arrive_s, p.key)) if p.node is None]
    if args.limit is not None:
        if not args.arrive_only:
            raise CliError("--limit applies to --arrive-only runs")
        order = list(order)[:args.limit]
    scratch = Path(tempfile.gettempdir()) / f"tidal-sim-{uuid.uuid4().hex}" if args.bus else None
    settings = SimulatorSettings(
        bus_url=args.bus or "nats://127.0.0.1:4222", namespace=args.namespace, cluster=args.cluster,
        http_host="127.0.0.1", http_port=0, seed=args.seed, clock="real-time" if args.real_time else "simulated",
        tick_s=args.tick, bind_failure_rate=args.bind_failure_rate, decision_timeout_s=args.decision_timeout,
        batch=args.batch, autorun=False, log_level="WARNING",
        # the protocol's thousands of nodes: sample a node when its pods change, not every tick
        metrics_heartbeat_s=3600.0 if args.arrive_only else None,
        expect_allocatable=not args.arrive_only and not args.bus and "oversell" in _services(args),
        # --bus: the run shares no stack folder, and runs side by side must not share a kubeconfig.
        kubeconfig=str((scratch or args.data_dir) / "kubeconfig"))
    return RunPlan(workload, settings, arrive_only=args.arrive_only, order=order, shapes=shapes,
                   reference=reference, progress_every=max(args.progress, 0), extra=extra, scratch=scratch)


def _services(args: argparse.Namespace) -> list[str]:
    return [s.strip() for s in args.services.split(",") if s.strip()]


def stack_env(args: argparse.Namespace) -> dict[str, str]:
    """Settings for the started services: every action enabled, fast
    fair-share updates, the GPU strategy, and for the arrive-only protocol
    no oversell and no holding back behind a waiting pod (each pod gets one
    try, as in the paper); `--env` over them."""
    env = {**ACTIONS_ENABLED, "TIDAL_SCORING_PERIOD_S": "1", "TIDAL_SCORING_SETTLE_TIME": "2m",
           "TIDAL_LOG_LEVEL": "WARNING"}
    if args.gpu_strategy:
        env["TIDAL_PLACEMENT_GPU_STRATEGY"] = args.gpu_strategy
    if args.arrive_only:
        env.update({"TIDAL_OVERSELL_DEFAULT_POLICY": "none", "TIDAL_PLACEMENT_PERMIT_TIMEOUT_S": "0.05"})
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("TIDAL_"):
            raise CliError(f"--env: expected TIDAL_NAME=VALUE, got {item!r}")
        env[key] = value
    return env


def _run_embedded(args: argparse.Namespace, plan, simulate):
    from tidal_simulator.bridge import stack_bridge

    from .services import available
    from .stack import Stack

    wanted = _services(args)
    known = available()
    if "placement" not in known:
        raise CliError("the placement service is not installed in this tidal (not in the service registry); "
                       "run one and pass --bus URL", exit_code=1)
    missing = [s for s in wanted if s not in known]
    if missing:
        print(f"simulate: not installed, running without: {', '.join(missing)}", file=sys.stderr)
    env = stack_env(args)
    shutil.rmtree(args.data_dir, ignore_errors=True)
    stack = Stack(args.data_dir, nats_port=0, namespace=args.namespace, cluster=args.cluster,
                  services=[s for s in wanted if s in known and s != "bridge"], extra_env=env)
    with stack:
        stack.wait_ready()
        print(f"simulate: services {', '.join(s.name for s in stack.services)} on {redact_url(stack.bus_url)} "
              f"(logs in {args.data_dir}/logs)", file=sys.stderr, flush=True)
        plan.settings = plan.settings.model_copy(update={"bus_url": stack.bus_url})
        print(f"simulate: the cluster's API server: kubectl --kubeconfig {plan.settings.kubeconfig} get pods -o wide",
              file=sys.stderr, flush=True)
        warmup = _metrics_warmup(stack, len(plan.workload.nodes))
        result = asyncio.run(simulate(plan, warmup=_registering(stack.webhook, warmup), bridge=stack_bridge(stack)))
        stack.check_alive()
    return result


def _registering(webhook, warmup):
    """With the webhook on the stack: its MutatingWebhookConfiguration
    registered with the stand-in API server before the pods arrive."""
    if webhook is None:
        return warmup

    async def register_then_warm_up(sim) -> None:
        sim.api.add_webhook_configuration(webhook.configuration())
        await warmup(sim)
    return register_then_warm_up


def _grace(seconds: float):
    async def warmup(sim) -> None:
        await asyncio.sleep(seconds)
        await sim.settled()
    return warmup


HANDLED = re.compile(r'^tidal_handler_seconds_count\{service="placement",stream="node\.topology"\} ([0-9.e+]+)$',
                     re.M)


def _metrics_warmup(stack, nodes: int, timeout: float = 120.0):
    """Wait until placement has handled every node's topology (its /metrics
    says so); fall back to a short grace when it exposes no such figure."""
    placement = next((s for s in stack.services if s.name == "placement"), None)

    def handled() -> float | None:
        try:
            with urllib.request.urlopen(f"{placement.url}/metrics", timeout=2) as response:
                found = HANDLED.search(response.read().decode())
        except OSError:
            return None
        return float(found.group(1)) if found else None

    async def warmup(sim) -> None:
        deadline, seen_any = elapsed() + timeout, elapsed() + 1.0
        while placement is not None and elapsed() < deadline:
            count = await asyncio.to_thread(handled)
            if count is not None and count >= nodes:
                break
            if count is None and elapsed() > seen_any:
                # placement reads the streams without a consumer group: give it time per node
                await asyncio.sleep(1.0 + 0.002 * nodes)
                break
            await asyncio.sleep(0.1)
        await sim.settled()
    return warmup


def _write(args: argparse.Namespace, result) -> None:
    for path, content in ((args.report, json.dumps(result.report, indent=2, default=str) + "\n"),
                          (args.html, result.html)):
        if path is not None:
            write_file(path, content, "--report" if path is args.report else "--html")
