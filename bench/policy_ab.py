"""The in-process placement policy of the work tree against another
commit's, side by side: both decide the same pods on the same synthetic
cluster (bench/placement_policy.py's `PolicyRun`) in one process, a chunk
of pods each in turn (ABBA), so that a shared machine's swings in speed fall
on both alike and the ratio holds where absolute rates move by 10 %.

Only the placement package is BASE's: `git archive` extracts its
services/tidal_placement into a temporary directory, imported under
another name. The libraries it imports (tidal_schemas, tidal_policy,
tidal_runtime, the simulator's topology builder) are the work tree's.

Prints one JSON line:
{"base": commit, "nodes": N, "pods": P, "strategy": S, "clock": "cpu", "shapes": distinct pod shapes,
 "pods_per_s": {"work_tree": X, "base": Y}, "ratio": X / Y,
 "same_decisions": whether every pod went to the same node}

Run: .venv/bin/python bench/policy_ab.py BASE [--nodes 5000] [--pods 20000]
     [--strategy S] [--chunk 250] [--seed 0] [--cpu-values N]
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import placement_policy
from placement_policy import CPU_VALUES, DEFAULT_STRATEGY, PolicyRun, as_placements_process, cpu_values

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "services/tidal_placement"
BASE_NAME = "tidal_placement_at_base"


def base_package(commit: str, into: Path):
    """The placement package of `commit`, imported as BASE_NAME from `into`."""
    try:
        tar = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, PACKAGE],
                             check=True, capture_output=True).stdout
    except FileNotFoundError:
        raise SystemExit("policy_ab: git is not installed: it reads the base commit's package") from None
    except subprocess.CalledProcessError as exc:
        why = exc.stderr.decode(errors="replace").strip().splitlines()
        raise SystemExit(f"policy_ab: no {PACKAGE} at {commit!r}: {why[-1] if why else 'git archive failed'}") from None
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    (into / PACKAGE).rename(into / BASE_NAME)
    sys.path.insert(0, str(into))
    return importlib.import_module(BASE_NAME)


def compare(base, args: argparse.Namespace) -> dict:
    cpus = cpu_values(args.cpu_values)
    trials = {"work_tree": PolicyRun(args.nodes, args.pods, args.strategy, args.live, args.seed, clock="cpu",
                                     cpus=cpus),
              "base": PolicyRun(args.nodes, args.pods, args.strategy, args.live, args.seed, clock="cpu", cpus=cpus,
                                policy=base)}
    turns = [("work_tree", "base"), ("base", "work_tree")]
    turn = 0
    while trials["work_tree"].done < args.pods:
        for name in turns[turn % 2]:
            trials[name].advance(args.chunk)
        turn += 1
    rates = {name: round(t.done / (t.latencies.sum() / 1e9), 1) for name, t in trials.items()}
    return {"base": args.base, "nodes": args.nodes, "pods": args.pods, "strategy": args.strategy, "clock": "cpu",
            "shapes": len({p.shape for p in trials["work_tree"].mix}),
            "pods_per_s": rates, "ratio": round(rates["work_tree"] / rates["base"], 4),
            "same_decisions": trials["work_tree"].nodes_chosen == trials["base"].nodes_chosen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit to compare the work tree with (anything git names a commit by)")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--strategy", default=DEFAULT_STRATEGY, help=f"default: the service's, {DEFAULT_STRATEGY}")
    parser.add_argument("--chunk", type=int, default=250, help="pods each one decides in its turn")
    parser.add_argument("--live", type=float, default=3.0, help="live pods per node before departures start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu-values", type=int, default=len(CPU_VALUES),
                        help="how many distinct CPU requests the pods draw from (as placement_policy.py)")
    args = parser.parse_args()
    if args.strategy not in placement_policy.GPU_STRATEGIES:
        parser.error(f"unknown strategy {args.strategy!r}")
    if min(args.nodes, args.pods, args.chunk) < 1:
        parser.error("--nodes, --pods and --chunk take a positive number")
    if not 2 <= args.cpu_values <= 296:
        parser.error("--cpu-values takes 2 to 296 (as placement_policy.py)")
    as_placements_process()
    into = Path(tempfile.mkdtemp(prefix="policy_ab_"))
    try:
        print(json.dumps(compare(base_package(args.base, into), args)), flush=True)
    finally:
        shutil.rmtree(into, ignore_errors=True)


if __name__ == "__main__":
    main()
