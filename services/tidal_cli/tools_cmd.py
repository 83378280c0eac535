"""Operator tools that live with the policy they exercise:
`tidal cpus pick` (node agent CPU choice) and `tidal fairshare trace`."""

from __future__ import annotations

import argparse
from pathlib import Path

from .errors import CliError
from .files import check_size
from .output import add_output_option, render


def add(subparsers) -> None:
    cpus = subparsers.add_parser("cpus", help="exclusive CPU choice, as the node agent makes it")
    cpu_verbs = cpus.add_subparsers(dest="verb", required=True, metavar="{pick}")
    # `tidal cpus pick ...` is routed to the node agent's own parser by main();
    # this entry only makes it show up in `tidal cpus --help`.
    cpu_verbs.add_parser("pick", help="pick CPUs: --topology FILE --available LIST --count N [--policy P]")

    fairshare = subparsers.add_parser("fairshare", help="fair-share score tools")
    fs_verbs = fairshare.add_subparsers(dest="verb", required=True, metavar="{trace}")
    from tidal_scoring.cli_fairshare import add_arguments, run

    trace = fs_verbs.add_parser("trace", help="replay a usage CSV through the fair-share decay",
                                description="Print CSV t,usage,score for a usage series (CSV t,usage).")
    add_arguments(trace)
    add_output_option(trace)

    def run_trace(args: argparse.Namespace) -> int:
        check_size(Path(args.usage))  # the bound every input file has, before the CSV is read
        return run(args) if args.output == "table" else print_trace(args)

    trace.set_defaults(func=run_trace)


def print_trace(args: argparse.Namespace) -> int:
    """`fairshare trace -o json|yaml`: the CSV's rows as {"items": [{t, usage, score}]}."""
    from tidal_scoring.cli_fairshare import UsageFileError, read_usage, trace

    if not args.initial_score >= 0 or args.initial_score == float("inf"):
        raise CliError("fairshare trace: --initial-score must be a non-negative number")
    try:
        rows = trace(read_usage(args.usage), args.adjust_time, args.period, args.initial_score)
    except UsageFileError as exc:
        raise CliError(f"fairshare trace: {exc}") from None
    print(render({"items": [{"t": t, "usage": usage, "score": score} for t, usage, score in rows]}, args.output))
    return 0


def run_cpus_pick(args: argparse.Namespace) -> int:
    from tidal_topology.cli_cpus import main

    for flag, value in zip(args.rest, args.rest[1:]):
        if flag == "--topology":
            check_size(Path(value))
    for item in args.rest:
        if item.startswith("--topology="):
            check_size(Path(item.partition("=")[2]))
    return main(args.rest)
