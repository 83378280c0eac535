"""`tidal nats-config` at 20,000 nodes: the first run (every user's nkey
and JWT made), a re-run (every key and JWT kept) and a run after one node
left (revoked) and one joined, each the real command line in its own
process (so interpreter start and imports count), then `nats-server -t`
loading the written config (operator mode: a few KB at any node count;
bench/nats_identity.py compares it with the allow-lists it replaced).

Prints one JSON line:
  first_s / rerun_s / churn_s  wall time of each run
  keys_made                    new keys per run, from the command's own output
  config_mb                    size of the server config written
  server_check_s               nats-server parsing and checking that config

Run: .venv/bin/python bench/nats_config.py [--nodes 20000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _paths import REPO  # noqa: E402

from tidal_bus.embedded import nats_server_binary  # noqa: E402


def nats_config(nodes_file: Path, out: Path) -> tuple[float, int]:
    """Wall time of one `tidal nats-config` and the keys it made."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "libs"), str(REPO / "services"), os.environ.get("PYTHONPATH", "")])}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tidal_cli.main", "nats-config", "--cluster", "prod",
                           "--nodes-file", str(nodes_file), "--out", str(out)],
                          capture_output=True, text=True, env=env)
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"tidal nats-config failed: {done.stderr.strip()}")
    made = re.search(r"(\d+) new key\(s\)", done.stdout)
    return took, int(made.group(1)) if made else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nats-config-") as temporary:
        work = args.dir or Path(temporary)
        work.mkdir(parents=True, exist_ok=True)
        nodes = [f"ip-10-{i // 65536}-{i // 256 % 256}-{i % 256}.ec2.internal" for i in range(args.nodes)]
        nodes_file, out = work / "nodes.txt", work / "nats.conf"
        nodes_file.write_text("\n".join(nodes) + "\n")
        first_s, first_made = nats_config(nodes_file, out)
        rerun_s, rerun_made = nats_config(nodes_file, out)
        nodes_file.write_text("\n".join(nodes[1:] + ["node-joined"]) + "\n")
        churn_s, churn_made = nats_config(nodes_file, out)
        started = time.monotonic()
        check = subprocess.run([nats_server_binary(), "-c", str(out), "-t"], capture_output=True, text=True)
        server_check_s = time.monotonic() - started
        if check.returncode != 0:
            sys.exit(f"nats-server refused the config: {check.stderr.strip()[:500]}")
        print(json.dumps({"nodes": args.nodes, "first_s": round(first_s, 2), "rerun_s": round(rerun_s, 2),
                          "churn_s": round(churn_s, 2),
                          "keys_made": {"first": first_made, "rerun": rerun_made, "churn": churn_made},
                          "config_mb": round(out.stat().st_size / 1e6, 1),
                          "server_check_s": round(server_check_s, 2)}))


if __name__ == "__main__":
    main()
