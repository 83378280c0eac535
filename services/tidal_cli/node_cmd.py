"""`tidal node audit`: the node agent's books against the real cgroup files
(see tidal_topology.cli_audit). `-o json|yaml` prints the counts and the
violations as one document; `--json` is the older spelling of `-o json`."""

from __future__ import annotations

import argparse
import contextlib
import io
import json

from .errors import CliError
from .output import FORMATS, render


def add(subparsers) -> None:
    from tidal_topology.cli_audit import add_arguments

    node = subparsers.add_parser("node", help="checks run on a node, beside its agent")
    verbs = node.add_subparsers(dest="verb", required=True, metavar="{audit}")
    audit = verbs.add_parser("audit", help="exclusive CPUs against every pod's cgroup: double-booked, leaked, "
                             "orphaned, drifted (exit 1 on any)",
                             description="Reads the agent's CPU checkpoint and the cgroup files; settings default "
                                         "to the agent's TIDAL_TOPOLOGY_* environment.")
    add_arguments(audit)  # has --json
    audit.add_argument("-o", "--output", choices=FORMATS, default=None,
                       help="output format: table (default), json or yaml (--json: the same as -o json)")
    audit.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tidal_topology.cli_audit import BadInput
    from tidal_topology.cli_audit import run as audit

    output = args.output or ("json" if args.json else "table")
    args.json = output != "table"
    try:
        if output != "yaml":
            return audit(args)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # the audit prints JSON: the same document as YAML
            code = audit(args)
        print(render(json.loads(printed.getvalue()), "yaml"))
        return code
    except BadInput as exc:
        raise CliError(f"node audit: {exc}") from None
