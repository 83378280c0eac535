"""`tidal cpus pick`: the §A CPU choice from the command line, so operators
can compare it with what kubelet's static CPU manager would give.

    tidal cpus pick --topology FILE --available LIST --count N
                    [--policy packed|spread|single-numa|auto] [--numa-load 0=0.4,1=0.7]

FILE is a JSON array of {"cpu", "core", "socket", "numa"}; LIST a cpuset
like `0-3,8,10-11`. The per-NUMA policies split the count over NUMA nodes as
placement does (`single-numa` and `auto` prefer the least loaded NUMA nodes,
by `--numa-load`, 0 where not given). Prints the chosen CPU ids as a JSON array and exits 0;
exits 1 with the reason when the request cannot be met; exits 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from pydantic import ValidationError

from tidal_schemas import Cpu

from tidal_policy.cpu_pick import POLICIES, pick_cpus
from .cpuset import parse_cpuset

EXIT_OK, EXIT_UNMET, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """Input the command cannot use; the message is one line for stderr."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit itself
        raise BadInput(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tidal cpus pick", description="Choose exclusive CPUs the way kubelet's static "
                     "CPU manager does (packed), or as placement splits a pod's CPUs over NUMA nodes.")
    parser.add_argument("--topology", required=True, type=Path, help='JSON array of {"cpu","core","socket","numa"}')
    parser.add_argument("--available", required=True, help="available CPUs as a cpuset, e.g. 0-3,8,10-11")
    parser.add_argument("--count", required=True, type=int, help="how many CPUs to pick")
    parser.add_argument("--policy", default="packed", choices=POLICIES)
    parser.add_argument("--numa-load", default="", help="load per NUMA node as ID=FRACTION,..., e.g. 0=0.4,1=0.7")
    return parser


def load_topology(path: Path) -> list[Cpu]:
    """The CPUs listed in a topology file; BadInput naming what is wrong."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise BadInput(f"cannot read topology file {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than json can follow
        raise BadInput(f"topology file {path} is not JSON: {str(exc)[:200] or 'nested too deeply'}") from None
    if not isinstance(data, list) or not data:
        raise BadInput(f"topology file {path} must hold a non-empty JSON array")
    cpus = []
    for position, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise BadInput(f"topology entry {position} is not an object")
        missing = [k for k in ("cpu", "core", "socket", "numa") if k not in entry]
        if missing:
            raise BadInput(f"topology entry {position} lacks {', '.join(missing)}")
        try:
            cpus.append(Cpu.model_validate(entry, strict=True))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise BadInput(f"topology entry {position}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    seen: set[int] = set()
    for cpu in cpus:  # one pass: a file of thousands of CPUs must not take quadratic time
        if cpu.cpu in seen:
            raise BadInput(f"topology lists cpu {cpu.cpu} more than once")
        seen.add(cpu.cpu)
    return cpus


def parse_numa_load(text: str, numas: set[int]) -> dict[int, float]:
    """`0=0.4,1=0.7` as {NUMA id: load}; BadInput naming the bad item."""
    loads: dict[int, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        numa, sep, value = item.partition("=")
        try:
            numa_id, load = int(numa), float(value)
        except ValueError:
            raise BadInput(f"--numa-load: {item[:40]!r} is not ID=FRACTION") from None
        if not sep or not math.isfinite(load) or load < 0:
            raise BadInput(f"--numa-load: {item[:40]!r} is not ID=FRACTION with a finite fraction >= 0")
        if numa_id not in numas:
            raise BadInput(f"--numa-load: numa {numa_id} is not in the topology")
        loads[numa_id] = load
    return loads


def main(argv: list[str]) -> int:
    """Run `tidal cpus pick` with `argv` (the arguments after `cpus pick`)."""
    try:
        args = _parser().parse_args(argv)
        topology = load_topology(args.topology)
        try:
            available = set(parse_cpuset(args.available))
        except ValueError as exc:
            raise BadInput(f"--available: {exc}") from None
        unknown = sorted(available - {c.cpu for c in topology})
        if unknown:
            raise BadInput(f"--available names cpus not in the topology: {unknown}")
        if args.count < 0:
            raise BadInput(f"--count must be >= 0, got {args.count}")
        numa_load = parse_numa_load(args.numa_load, {c.numa for c in topology})
    except BadInput as exc:
        print(f"tidal cpus pick: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # --help: argparse printed it and wants to exit
        return int(exc.code or 0)
    result = pick_cpus(topology, available, args.count, policy=args.policy, numa_load=numa_load)
    if result.cpus is None:
        print(f"tidal cpus pick: cannot pick {args.count} cpus ({args.policy}): {result.reason}", file=sys.stderr)
        return EXIT_UNMET
    print(json.dumps(result.cpus))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
