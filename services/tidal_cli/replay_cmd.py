"""`tidal replay`: first the exact replay — each placement replica's journal
run again with its own settings, every decision checked equal to the
recording or the first divergence named (exit 1) — then, with `--set`, the
recorded node and pod events of a window re-run through placement with
other settings in a sandbox namespace, and how its decisions differ from
the recorded ones."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from tidal_bus.api import parse_time
from tidal_clock import now_utc

from .errors import CliError
from .explain_cmd import describe as describe_decision
from .options import add_bus_options, bus_for, count, write_file
from .output import add_output_option, render

SETTABLE = {"placement"}
NOT_SETTABLE = {"bus_url", "namespace", "cluster", "clusters", "all_clusters", "http_host", "http_port", "http_fd", "log_level"}


def add(subparsers) -> None:
    replay = subparsers.add_parser(
        "replay", help="replay a recording exactly, and what-if: with other placement settings",
        description="Read a cluster's recorded streams (only read: nothing is published), run each placement "
                    "replica's journal again with the settings it ran with and check every decision equal to the "
                    "recording (exit 1 naming the first divergence otherwise); with --set, run the same journal "
                    "with those settings, the cluster answering the replay's decisions, and compare the pods "
                    "of the window with the unchanged run.")
    replay.add_argument("--from", dest="start", required=True, metavar="TIME|SEQ",
                        help="window start: ISO-8601 time with zone, -30m / -2h (ago), a pod.lifecycle stream "
                             "sequence number, or 'earliest'")
    replay.add_argument("--to", dest="end", metavar="TIME|SEQ", help="window end (default: the latest event)")
    replay.add_argument("--set", dest="overrides", action="append", default=[], metavar="SERVICE.SETTING=VALUE",
                        help="a setting of the replayed placement, e.g. placement.gpu-strategy=fgd (repeatable)")
    replay.add_argument("--report", type=Path, help="write the verdict and the comparison as JSON here")
    replay.add_argument("--html", type=Path, help="write the verdict and the comparison as a self-contained HTML page")
    replay.add_argument("--show", type=count, default=20, help="pods that differ to list (default 20)")
    replay.add_argument("--recording", type=Path, metavar="DATA_DIR",
                        help="replay what a stopped `tidal simulate`/`tidal up` left in DATA_DIR (e.g. "
                             ".tidal/simulate): its nats-server store is served on a free port instead of --bus")
    add_output_option(replay)  # json|yaml: the --report document on stdout
    add_bus_options(replay)
    replay.set_defaults(func=run)


def parse_point(text: str | None, now: datetime):
    """--from/--to: a Point, or None for an open end."""
    from tidal_simulator.replay_plan import Point

    if text is None or text == "earliest":
        return None
    if text.isascii() and text.isdigit():  # "²".isdigit() is true, and int() refuses it
        if int(text) > 2**63 - 1:
            raise CliError(f"--from/--to {text[:30]}: a sequence number is at most {2**63 - 1}")
        return Point(sequence=int(text))
    try:
        return Point(time=parse_time(text, now))
    except ValueError as exc:
        raise CliError(f"--from/--to: expected 'earliest', a sequence number, or {exc}") from None


def parse_overrides(items: list[str]) -> dict[str, str]:
    """`placement.gpu-strategy=fgd` → {"gpu_strategy": "fgd"}, checked
    against the placement settings."""
    from tidal_placement.settings import PlacementSettings

    fields = set(PlacementSettings.model_fields) - NOT_SETTABLE
    overrides: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        service, _, setting = name.partition(".")
        if not sep or not setting:
            raise CliError(f"--set {item!r}: expected SERVICE.SETTING=VALUE, e.g. placement.gpu-strategy=fgd")
        if service not in SETTABLE:
            raise CliError(f"--set {item!r}: only {', '.join(sorted(SETTABLE))} settings can be replayed "
                           "(scores and allocatable are replayed as recorded)")
        field = setting.replace("-", "_")
        if field not in fields:
            raise CliError(f"--set {item!r}: placement has no setting {setting!r}; "
                           f"known: {', '.join(sorted(f.replace('_', '-') for f in fields))}")
        overrides[field] = value
    try:
        PlacementSettings(**overrides)
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise CliError(f"--set placement.{str(problem['loc'][0]).replace('_', '-')}: {problem['msg']}") from None
    return overrides


def run(args: argparse.Namespace) -> int:
    from tidal_simulator.replay_report import describe

    now = now_utc()
    start, end = parse_point(args.start, now), parse_point(args.end, now)
    overrides = parse_overrides(args.overrides)
    if args.recording is not None:
        exact, result = _replay_recording(args, start, end, overrides)
    else:
        exact, result = asyncio.run(_replay(args, start, end, overrides))
    report = {"exact": exact.to_json(), **(result.to_json() if result is not None else {})}
    table = args.output == "table"
    if table:
        print(exact.describe())
        if result is not None:
            print()
            print(describe(result, show=args.show))
    else:  # the report's document, as plain data (times as ISO strings), and nothing else on stdout
        print(render(json.loads(json.dumps(report, default=str)), args.output))
    said = sys.stdout if table else sys.stderr
    if args.report:
        write_file(args.report, json.dumps(report, indent=2, default=str), "--report")
        print(f"report: {args.report}", file=said)
    if args.html:
        from tidal_simulator.replay_html import render_replay_html

        write_file(args.html, render_replay_html(exact, result), "--html")
        print(f"html report: {args.html}", file=said)
    return 0 if exact.equal else 1


def _replay_recording(args: argparse.Namespace, start, end, overrides: dict[str, str]):
    """Serve the recording's store with an embedded nats-server for the replay."""
    from tidal_bus.embedded import EmbeddedNats

    store = args.recording / "nats"
    if not (store / "jetstream").is_dir():
        raise CliError(f"--recording {args.recording}: no nats-server store there (expected {store}/jetstream)")
    server = EmbeddedNats(store).start()
    try:
        args.bus = server.url
        return asyncio.run(_replay(args, start, end, overrides))
    finally:
        server.stop()


async def _replay(args: argparse.Namespace, start, end, overrides: dict[str, str]):
    from tidal_simulator.replay_compare import compare
    from tidal_simulator.replay_exact import (read_recording, recorded_run, replay_acting_stages, replay_recording,
                                              what_if)
    from tidal_simulator.replay_plan import RecordedOutcome, build_plan, resolve_window
    from tidal_simulator.replay_report import ReplayResult
    from tidal_simulator.replay_run import LiveStreams

    async with bus_for(args, source="replay", read_only=True) as live_bus:
        recording = await read_recording(LiveStreams(live_bus), args.cluster)
    exact = replay_recording(recording, args.cluster, args.namespace)
    await replay_acting_stages(recording, args.cluster, exact)
    try:
        window = resolve_window(start, end, recording.timeline)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    plan = build_plan(recording.timeline, window)
    if not plan.arrivals:
        pods = [r for r in recording.timeline if r.stream == "pod.lifecycle"]
        seen = (f"{len(pods)} pod events from {pods[0].time.isoformat()} to {pods[-1].time.isoformat()}"
                if pods else "no pod events")
        raise CliError(f"no pod arrived in the window in cluster {args.cluster!r} of namespace "
                       f"{args.namespace!r} ({seen})")
    if not overrides or not exact.equal:  # a what-if means something only against a baseline that holds
        return exact, None
    changes = ", ".join(f"placement.{k.replace('_', '-')}={v}" for k, v in overrides.items())
    print(f"replaying {len(plan.arrivals)} pods of cluster {args.cluster} with {changes}", file=sys.stderr, flush=True)
    # Both sides the same way: each pod's last decision in the recording (which the unchanged run equals:
    # checked above) and in the changed run.
    baseline, changed = recorded_run(recording), what_if(recording, args.cluster, args.namespace, overrides)
    for key in plan.arrivals:
        placed = baseline.placed.get(key)
        plan.recorded[key] = (RecordedOutcome(placed.node, placed.gpus) if placed is not None
                              else RecordedOutcome(None, reason=baseline.why.get(key, "no decision")))
    comparison = compare(plan, changed.placed, changed.why)
    differing = [pod for pod, *_ in (*comparison.moved, *comparison.only_recorded, *comparison.only_replay)]
    explain = {pod: {run: describe_decision(side.last[pod]) if pod in side.last else "no decision"
                     for run, side in (("baseline", baseline), ("changed", changed))} for pod in differing}
    return exact, ReplayResult(cluster=args.cluster, namespace=args.namespace, window=window, overrides=overrides,
                               comparison=comparison, invented=sorted(changed.invented), dropped=changed.dropped,
                               explain=explain)
