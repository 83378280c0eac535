"""`tidal node audit`: the node agent's books against the real cgroup files
(see tidal_topology.cli_audit)."""

from __future__ import annotations

import argparse

from .errors import CliError


def add(subparsers) -> None:
    from tidal_topology.cli_audit import add_arguments

    node = subparsers.add_parser("node", help="checks run on a node, beside its agent")
    verbs = node.add_subparsers(dest="verb", required=True, metavar="{audit}")
    audit = verbs.add_parser("audit", help="exclusive CPUs against every pod's cgroup: double-booked, leaked, "
                             "orphaned, drifted (exit 1 on any)",
                             description="Reads the agent's CPU checkpoint and the cgroup files; settings default "
                                         "to the agent's TIDAL_TOPOLOGY_* environment.")
    add_arguments(audit)
    audit.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tidal_topology.cli_audit import BadInput
    from tidal_topology.cli_audit import run as audit

    try:
        return audit(args)
    except BadInput as exc:
        raise CliError(f"node audit: {exc}") from None
