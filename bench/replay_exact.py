"""Exact replay of an openb recording made through the bridge: `tidal
simulate` records the trace's arrivals (every service its own process, the
bridge binding through the simulated cluster's API server, the kubelet
stand-ins admitting), then `tidal replay` with the recorded settings runs
every stage's journal again and checks each decision and action equal.
Prints both commands' wall times and the verdict; exits 1 if the replay is
not equal.

`--nodes-limit` keeps the first N GPU nodes of the trace's node list, so a
short run fills the cluster and decides under contention (pods waiting,
tried again, refused), not only on an empty one.

Run: .venv/bin/python bench/replay_exact.py [--pods 2600] [--nodes-limit 260] [--inflate 1.3] [--seed 42]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _paths import OPENB

TIDAL = str(Path(sys.executable).parent / "tidal")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2600, help="at most this many arrivals recorded (default 2600)")
    parser.add_argument("--nodes-limit", type=int, default=0, help="keep the first N GPU nodes (0: all 1213)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--inflate", type=float, default=1.3, help="arrive until GPU requests reach this share "
                        "of capacity (the openb protocol's 130 %%)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidal-replay-exact-") as scratch:
        nodes = OPENB / "openb_node_list_gpu_node.csv"
        if args.nodes_limit:
            lines = nodes.read_text().splitlines()
            nodes = Path(scratch) / "nodes.csv"
            nodes.write_text("\n".join(lines[:1 + args.nodes_limit]) + "\n")
        data = Path(scratch) / "recording"
        began = time.monotonic()
        lived = subprocess.run([TIDAL, "simulate", "--nodes", str(nodes), "--pods",
                                str(OPENB / "openb_pod_list_default.csv"), "--arrive-only", "--inflate", str(args.inflate), "--seed", str(args.seed),
                                "--limit", str(args.pods), "--data-dir", str(data), "--progress", "0"],
                               capture_output=True, text=True)
        lived_s = time.monotonic() - began
        summary = [line for line in lived.stdout.splitlines() if line.startswith(("workload", "decisions",
                                                                                     "invariant"))]
        print(f"recorded: {lived_s:.1f} s, exit {lived.returncode}", *summary, sep="\n  ")
        began = time.monotonic()
        replay = subprocess.run([TIDAL, "replay", "--recording", str(data), "--namespace", "sim", "--cluster", "sim",
                                 "--from", "earliest"], capture_output=True, text=True)
        print(f"replayed: {time.monotonic() - began:.1f} s, exit {replay.returncode}\n  {replay.stdout.strip()}")
        if replay.returncode:
            print(replay.stderr.strip()[-2000:], file=sys.stderr)
        return replay.returncode or lived.returncode


if __name__ == "__main__":
    sys.exit(main())
