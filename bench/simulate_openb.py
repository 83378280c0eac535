"""GPU allocation on the real openb default trace through the whole
pipeline: `tidal simulate --arrive-only --inflate 1.3` (embedded NATS, the
real placement, scoring, oversell, remediation and bridge services, the
bridge binding every decision through the simulated cluster's API server,
the auditor checking the run) once per GPU strategy, printed next to the published
medians (FGD 95.23 %, BestFit 92.91 % at 100 % arrived) and next to the
in-process replay of the same arrival sequence (`openb_replay.replay`, the
placement core without the bus), with the wall time of each.

Run: .venv/bin/python bench/simulate_openb.py [--strategies best-fit fgd fgd-cpu] [--seed 42]
         [--limit N]   (only the first N arrivals over the bus; the replay always runs them all)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _paths import OPENB

import numpy as np

from tidal_placement import FragModel
from tidal_placement import make_strategy
from tidal_placement import typical_workload
from tidal_simulator.openb import read_nodes, read_pods
from tidal_simulator.openb_replay import alloc_curve, arrival_sequence, replay

DATA = OPENB
NODES, PODS = DATA / "openb_node_list_gpu_node.csv", DATA / "openb_pod_list_default.csv"
PUBLISHED = {"fgd": 95.23, "best-fit": 92.91}
REPLAY_OPTIONS = {"best-fit": {"quantised": True, "scores_cpu_pods": True}}
SIMULATE = [sys.executable, "-c", "import sys; from tidal_cli import main as m, simulate_cmd as s; "
            "m.COMMANDS.append(s) if s not in m.COMMANDS else None; sys.exit(m.main(sys.argv[1:]))"]


def over_the_bus(strategy: str, seed: int, out: Path, limit: int | None) -> tuple[dict, float]:
    """One `tidal simulate` run; (report, wall seconds)."""
    report = out / f"{strategy}.json"
    argv = [*SIMULATE, "simulate", "--nodes", str(NODES), "--pods", str(PODS), "--arrive-only", "--inflate", "1.3",
            "--seed", str(seed), "--gpu-strategy", strategy, "--report", str(report), "--html", str(out / f"{strategy}.html"),
            "--progress", "1000", "--data-dir", str(out / f"{strategy}-stack")]
    if limit:
        argv += ["--limit", str(limit)]
    started = time.perf_counter()
    done = subprocess.run(argv)  # exit 1 when the auditor found violations: the report still says which
    if not report.exists():
        raise SystemExit(f"tidal simulate exited {done.returncode} without a report")
    return json.loads(report.read_text()), time.perf_counter() - started


def in_process(strategy: str, seed: int) -> tuple[dict, float]:
    """The same arrival sequence through `openb_replay.replay`; (curve, seconds)."""
    nodes, pods = read_nodes(NODES), read_pods(PODS)
    workload = typical_workload([p.shape for p in pods])
    sequence = arrival_sequence(pods, seed, 1000 * sum(n.gpus for n in nodes), 1.3)
    started = time.perf_counter()
    log = replay(nodes, sequence, make_strategy(strategy, workload, **REPLAY_OPTIONS.get(strategy, {})),
                 FragModel(workload), rank=np.random.default_rng([seed, 7]).permutation(len(nodes)))
    return alloc_curve(log), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=["best-fit", "fgd", "fgd-cpu"])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--limit", type=int, help="arrivals released over the bus (default: all)")
    parser.add_argument("--skip-bus", action="store_true", help="only the in-process replay")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="tidal-simulate-openb-"))
    rows = []
    for strategy in args.strategies:
        curve, replay_s = in_process(strategy, args.seed)
        row = {"strategy": strategy, "replay_alloc_100": curve[100], "replay_s": round(replay_s, 1)}
        if not args.skip_bus:
            report, bus_s = over_the_bus(strategy, args.seed, out, args.limit)
            gpu, decisions = report["gpu"], report["decisions"]
            row.update(bus_alloc_100=gpu["allocation_pct_by_arrived"].get("100"), bus_s=round(bus_s, 1),
                       arrived_pct=gpu.get("arrived_pct_final"), decisions_per_s=decisions["per_second"],
                       p50_ms=decisions["latency_ms"]["p50"], p99_ms=decisions["latency_ms"]["p99"],
                       violations=report["invariants"]["violations"])
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(f"\n{'strategy':<10} {'bus alloc@100':>14} {'bus wall s':>11} {'replay alloc@100':>17} {'replay s':>9} "
          f"{'published':>10}")
    for r in rows:
        print(f"{r['strategy']:<10} {str(r.get('bus_alloc_100', '-')):>14} {str(r.get('bus_s', '-')):>11} "
              f"{r['replay_alloc_100']:>17.2f} {r['replay_s']:>9.1f} {str(PUBLISHED.get(r['strategy'], '-')):>10}")
    print(f"reports in {out}")


if __name__ == "__main__":
    main()
