"""Write a small trace in the openb CSV formats to examples/openb_small/
(the shape mix of the real default trace, scaled down, seeded).

Run: .venv/bin/python examples/make_openb_small.py
Then: .venv/bin/tidal simulate --nodes examples/openb_small/nodes.csv \
          --pods examples/openb_small/pods.csv --arrive-only --inflate 1.3

Nodes: GPU models and GPUs per node as in the real GPU-node list (G2 × 8,
T4 × 2, P100 × 2, V100M16 × 4, V100M32 × 8), CPU and memory in the same
proportion. Pods: 13 % CPU-only, 38 % GPU shares (1 GPU, 100–900 milli),
47 % one whole GPU, 2 % 2–8 GPUs; a few constrained to a GPU model; total
GPU request near 98 % of capacity, like the default trace.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "openb_small"
SEED = 11
NODE_KINDS = [("G2", 8, 96000, 786432, 9), ("T4", 2, 64000, 262144, 7), ("P100", 2, 64000, 262144, 2),
              ("V100M16", 4, 96000, 393216, 1), ("V100M32", 8, 96000, 786432, 1)]
HEADER = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
          "creation_time", "deletion_time", "scheduled_time"]


def nodes() -> list[tuple]:
    rows, i = [], 0
    for model, gpus, cpu, mem, count in NODE_KINDS:
        for _ in range(count):
            rows.append((f"openb-node-{i:04d}", cpu, mem, gpus, model))
            i += 1
    return rows


def pods(rng: np.random.Generator, capacity_milli: int) -> list[tuple]:
    rows, total, i = [], 0, 0
    while total < 0.98 * capacity_milli:
        kind = rng.choice(4, p=[0.13, 0.38, 0.47, 0.02])
        cpu = int(rng.choice([2000, 4000, 6000, 8000, 12000]))
        num, milli = {0: (0, 0), 1: (1, int(rng.choice([100, 250, 300, 460, 500, 700, 900]))),
                      2: (1, 1000), 3: (int(rng.choice([2, 4, 8])), 1000)}[int(kind)]
        spec = str(rng.choice(["T4", "V100M16|V100M32"])) if num and rng.random() < 0.05 else ""
        created = i * 60
        rows.append((f"openb-pod-{i:04d}", cpu, cpu * 2, num, milli, spec, str(rng.choice(["LS", "BE"])),
                     "Running", created, created + int(rng.integers(600, 86400)), created))
        total += num * milli
        i += 1
    return rows


def main() -> None:
    rng = np.random.default_rng(SEED)
    node_rows = nodes()
    pod_rows = pods(rng, 1000 * sum(r[3] for r in node_rows))
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "nodes.csv", "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        writer.writerows(node_rows)
    with open(OUT / "pods.csv", "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(pod_rows)
    print(f"wrote {OUT}: {len(node_rows)} nodes, {len(pod_rows)} pods")


if __name__ == "__main__":
    main()
