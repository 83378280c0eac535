"""`tidal node audit`: the node audit (`audit.py`) from the command line,
run on the node from the agent's books (its checkpoint file) and the real
cgroup files — no running agent needed; the agent's /metrics gauge
`tidal_node_audit_violations` says the same from its own pass.

    tidal node audit [--state-file F] [--cgroup-root DIR] [--cgroup-parent P]
                     [--cgroup-version auto|v1|v2] [--sysfs-root DIR] [--numa-override MAP] [--json]

Defaults are the agent's own settings (the TIDAL_TOPOLOGY_* environment).
Prints each violation and the count per kind; exits 0 when there is none,
1 when there is any; `BadInput` (unreadable books, a bad setting) is exit 2.

Without the agent's pod table, a pod is judged alive here by its cgroup:
only exclusive CPUs of a pod seen running whose cgroup is gone are orphaned.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pydantic import ValidationError

from . import checkpoint
from .audit import Violation, audit, counts
from .cgroup_paths import detect_version
from .cgroups import CgroupFs, scan_pod_cpusets
from .cpuset_plan import expected_cpusets
from .settings import TopologySettings
from .sysfs import SysfsError, memory_nodes, read_topology

EXIT_OK, EXIT_VIOLATIONS = 0, 1


class BadInput(Exception):
    """Input the command cannot use; the message is one line for stderr."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-file", help="the agent's CPU checkpoint (default: its setting)")
    parser.add_argument("--cgroup-root", help="cgroup mount (default: its setting)")
    parser.add_argument("--cgroup-parent", help="kubepods parent cgroup (default: its setting)")
    parser.add_argument("--cgroup-version", choices=("auto", "v1", "v2"))
    parser.add_argument("--sysfs-root", help="sysfs mount (default: its setting)")
    parser.add_argument("--numa-override", help="cpu:numa pairs, as the agent's setting")
    parser.add_argument("--json", action="store_true", help="print the violations as JSON")


def node_audit(state: checkpoint.CpuState, fs: CgroupFs, numa_of: dict[int, int], mems: frozenset[int],
               manage_all: bool) -> list[Violation]:
    """The audit of the books against the cgroups under `fs` right now."""
    found = scan_pod_cpusets(fs)
    actual = {uid: p.cpus for uid, p in found.items() if p.cpus is not None}
    expected = expected_cpusets(state, actual, numa_of, mems, manage_all)
    live = {key for key, claim in state.claims.items() if claim.stage != "running" or claim.uid in actual}
    return audit(state, expected, actual, live)


def _settings(args: argparse.Namespace) -> TopologySettings:
    given = {name: getattr(args, name) for name in ("state_file", "cgroup_root", "cgroup_parent", "cgroup_version",
                                                    "sysfs_root", "numa_override") if getattr(args, name) is not None}
    try:
        return TopologySettings(**given)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadInput(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def _books(settings: TopologySettings, cpus: list[int]) -> tuple[checkpoint.CpuState, str]:
    loaded = checkpoint.load_state(settings.state_file)
    if loaded.status == "corrupt":
        raise BadInput(f"the agent's books are unreadable: {loaded.reason}")
    if loaded.status == "missing":
        return checkpoint.new_state(cpus, settings.reserved), f"no books at {settings.state_file}: none held"
    return loaded.state, f"books {settings.state_file}"


def run(args: argparse.Namespace) -> int:
    """`tidal node audit` with parsed `args`; the exit code."""
    settings = _settings(args)
    try:
        machine = read_topology(settings.sysfs_root, settings.parse_override(settings.numa_override) or None)
    except (SysfsError, OSError, ValueError) as exc:
        raise BadInput(f"cannot read the CPU topology: {exc}") from None
    state, source = _books(settings, [c.cpu for c in machine.cpus])
    root = Path(settings.cgroup_root)
    version = detect_version(root) if settings.cgroup_version == "auto" else settings.cgroup_version
    fs = CgroupFs(root=root, parent=settings.cgroup_parent, version=version)
    violations = node_audit(state, fs, {c.cpu: c.numa for c in machine.cpus},
                            frozenset(memory_nodes(settings.sysfs_root)), settings.exclusive_cpus)
    tally = counts(violations)
    if args.json:
        print(json.dumps({"counts": tally, "violations": [v.__dict__ for v in violations]}, indent=1))
    else:
        print(f"node audit of {settings.node_name} ({source}; cgroups under {root} parent {settings.cgroup_parent})")
        for v in violations:
            print(f"  {v.kind}: {v.pod}: {v.detail}")
        print("  " + ", ".join(f"{kind} {n}" for kind, n in tally.items()))
    return EXIT_VIOLATIONS if violations else EXIT_OK
