"""`tidal demo`: the whole stack on the embedded default, a sample cluster
published into it, and a summary of what flowed through every stage."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from collections import Counter
from pathlib import Path

from tidal_bus import Bus, StartAt
from tidal_schemas import PlacementDecision, SchemaError
from tidal_schemas.fence import DecisionFence
from tidal_schemas.streams import STREAMS

from .errors import CliError
from .options import seconds
from .sample import sample_events
from .services import load
from .stack import Stack


def add(subparsers) -> None:
    demo = subparsers.add_parser(
        "demo", help="run the pipeline on a sample cluster and print a summary",
        description="Start an embedded nats-server and every service, publish a sample cluster, wait until "
                    "every running stage has produced its events, print a summary, stop everything.")
    demo.add_argument("--data-dir", type=Path, default=Path(".tidal/demo"), help="wiped at start")
    demo.add_argument("--timeout", type=seconds, default=90.0, help="seconds to wait for every stage")
    demo.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    shutil.rmtree(args.data_dir, ignore_errors=True)
    # Short periods so a demo of a minute shows several rounds of every stage.
    demo_env = {"TIDAL_SCORING_PERIOD_S": "1", "TIDAL_TOPOLOGY_INTERVAL_S": "1",
                "TIDAL_TOPOLOGY_STATE_FILE": str(args.data_dir.resolve() / "cpu-state.json")}
    with Stack(args.data_dir, nats_port=0, namespace="demo", cluster="demo", extra_env=demo_env) as stack:
        stack.wait_ready()
        print(stack.describe(), flush=True)
        expected = {stream for s in stack.services for stream in load(s.name).produces}
        counts, invalid, decisions = asyncio.run(_publish_and_watch(stack, expected, args.timeout))
        stack.check_alive()
    _print_decisions(decisions)
    _print_summary(counts, invalid, expected, [s.name for s in stack.services], time.monotonic() - started)
    missing = sorted(s for s in expected if not counts.get(s))
    if missing:
        raise CliError(f"no events on {', '.join(missing)} within {args.timeout:.0f}s "
                       f"(logs in {args.data_dir}/logs)", exit_code=1)
    return 0


async def _publish_and_watch(stack: Stack, expected: set[str], timeout: float):
    events = sample_events()
    async with Bus.from_url(stack.bus_url, namespace=stack.namespace, cluster=stack.cluster, source="demo") as bus:
        for payload in events:
            await bus.publish(payload)
        print(f"published {len(events)} sample events", flush=True)
        deadline = time.monotonic() + timeout
        while True:
            counts, invalid = await _count(bus)
            if all(counts.get(s) for s in expected) or time.monotonic() > deadline:
                return counts, invalid, await _decisions(bus)
            await asyncio.sleep(0.5)


async def _decisions(bus: Bus) -> dict[str, PlacementDecision]:
    """The latest decision that counts for each pod."""
    fence, latest = DecisionFence(), {}
    async for _, event in bus.read("placement.decision", StartAt.earliest()):
        if not isinstance(event, SchemaError) and fence.admit(event.payload) and event.payload.outcome != "fence":
            latest[event.payload.event_key()] = event.payload
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


async def _count(bus: Bus) -> tuple[Counter, int]:
    counts: Counter = Counter()
    invalid = 0
    for name in STREAMS:
        async for _, event in bus.read(name, StartAt.earliest()):
            if isinstance(event, SchemaError):
                invalid += 1
            else:
                counts[name] += 1
    return counts, invalid


def _print_summary(counts: Counter, invalid: int, expected: set[str], services: list[str], seconds: float) -> None:
    print("\nstream               events  stage")
    for name, spec in STREAMS.items():
        mark = "expected" if name in expected else ""
        print(f"{name:<20} {counts.get(name, 0):>6}  {', '.join(spec.producers):<28} {mark}")
    print(f"\nservices: {', '.join(services) or 'none installed yet'}; undecodable: {invalid}; "
          f"dead letters: {counts.get('dead.letter', 0)}; took {seconds:.1f}s")
