"""GPU placement quality on the real openb trace, by the arrive-only protocol
of the FGD paper's simulator (data/openb/METHOD.md §3).

For each strategy and seed: pods sorted by name and shuffled with the seed,
inflated by uniform sampling with replacement up to 1.3 × cluster GPU
capacity, then placed in order by Tidal's policy core (`decide` over the
scheduler cache: CPU, memory, GPU model and GPU room must fit); nothing
departs. Logged after every arrival and averaged per arrived level
(cumulative GPU request of arrived pods, placed or not, in % of capacity):
GPU allocation ratio, fragmented GPU (% of capacity) and fragmented share
of idle GPU — the measure of METHOD.md §2 with the trace's typical pods.

Ties left after a strategy's keys go to the first node of a per-seed random
node order, as in the simulator (which prefixes node names with a random
permutation); `--tie random` picks uniformly instead.

Prints one JSON line per (strategy, seed), then a summary with the median
allocation at 100 % arrived next to the authors' published numbers.

`--variants [NAME ...]` (default: all of `openb_variants.VARIANTS`) runs
the stress variants instead: for each seed the variant's pod list is
generated from the trace with that seed, then replayed by the same
protocol; the summary is one row per variant, the median allocation at
100 % arrived per strategy, and each strategy's margin over fgd.

A strategy may carry options, `name:key=value,…` (`fgd-cpu:packing=true`),
to measure what one rule is worth within the same run.

`joint` decides the arrivals in windows (`joint:window=64`): each window
once its last pod has arrived, so its pods are decided knowing the next
ones — a protocol change (decisions per window, not per arrival) that the
summary names beside its figures. `--bound` adds, per seed, the upper
bound on the GPU allocation at 100 % arrived that any run of the
protocol could reach (`openb_bound.level_bound`), and a seed-by-seed
table of every strategy against the first one and the bound.
`joint:solver=cpsat` adds a CP-SAT pass over each window (needs
OR-Tools); a joint strategy's plan time per window is printed.

Run: .venv/bin/python bench/placement_openb.py [--seeds 10] [--strategies best-fit fgd fgd-cpu] [--jobs 2]
     .venv/bin/python bench/placement_openb.py --variants [cpu300 spec35 …] --seeds 5
     .venv/bin/python bench/placement_openb.py --variants --strategies fgd-cpu joint --bound
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _paths import OPENB

import numpy as np

from tidal_placement import FragModel
from tidal_placement import GPU_STRATEGIES, JointStrategy, make_strategy
from tidal_placement import typical_workload
from tidal_simulator.openb import read_nodes, read_pods
from tidal_simulator.openb_variants import BY_NAME, VARIANTS, generate
from tidal_simulator.openb_bound import level_bound
from tidal_simulator.openb_replay import alloc_curve, arrival_sequence, frag_curve, frag_ratio_curve, replay

DATA = OPENB
PUBLISHED_NAMES = {"best-fit": "05-BestFit", "fgd": "06-FGD"}
# how the simulator's baselines score: BestFit's integer, min-max normalised score, CPU-only pods included
OPTIONS = {"best-fit": {"quantised": True, "scores_cpu_pods": True}}


def parse_label(label: str) -> tuple[str, dict]:
    """`name[:key=value,…]` → (name, options): a strategy with options set,
    e.g. `fgd-cpu:packing=true,rho_scale=0.5` (true/false, numbers, words)."""
    name, _, rest = label.partition(":")
    options: dict = {}
    for item in filter(None, rest.split(",")):
        key, eq, text = item.partition("=")
        if not eq:
            raise ValueError(f"{label}: option {item!r} is not key=value")
        if text in ("true", "false"):
            options[key] = text == "true"
        else:
            try:
                options[key] = float(text) if "." in text else int(text)
            except ValueError:
                options[key] = text
    return name, options


BOUND = "bound"


def inputs(seed: int, data_dir: str, trace: str, nodes_file: str, ratio: float, variant: str | None):
    """(nodes, pods of the trace or variant, arrival sequence, capacity) for one seed."""
    nodes, pods = read_nodes(Path(data_dir) / nodes_file), read_pods(Path(data_dir) / trace)
    if variant is not None:
        pods = generate(pods, nodes, BY_NAME[variant], seed)
    capacity = 1000 * sum(n.gpus for n in nodes)
    return nodes, pods, arrival_sequence(pods, seed, capacity, ratio), capacity


def bound_one(args: tuple) -> dict:
    """The bound on the allocation at 100 % arrived for one seed
    (`openb_bound.level_bound`: over the lines that figure averages)."""
    _, seed, data_dir, trace, nodes_file, ratio, _, variant = args
    nodes, _, sequence, capacity = inputs(seed, data_dir, trace, nodes_file, ratio, variant)
    started = time.perf_counter()
    bound = level_bound(nodes, sequence, 100)
    return {"strategy": BOUND, "seed": seed, "trace": trace, "variant": variant, "pods": bound.pods,
            "forced": bound.forced, "last_line_pct": round(bound.last_line_pct, 2),
            "alloc_pct": {100: round(bound.alloc_pct, 2)}, "wall_s": round(time.perf_counter() - started, 2)}


def run_one(args: tuple) -> dict:
    """Replay one (strategy, seed) and summarise it."""
    label, seed, data_dir, trace, nodes_file, ratio, tie, variant = args
    if label == BOUND:
        return bound_one(args)
    strategy_name, options = parse_label(label)
    nodes, pods, sequence, capacity = inputs(seed, data_dir, trace, nodes_file, ratio, variant)
    workload = typical_workload([p.shape for p in pods])
    strategy = make_strategy(strategy_name, workload, **{**OPTIONS.get(strategy_name, {}), **options})
    times: list[float] = []  # a joint strategy's wall time per window planned
    if isinstance(strategy, JointStrategy):
        def timed(*plan_args, plan=strategy.plan):
            begun = time.perf_counter()
            try:
                return plan(*plan_args)
            finally:
                times.append(time.perf_counter() - begun)
        strategy.plan = timed
    ties = np.random.default_rng([seed, 7])
    rank, rng = (ties.permutation(len(nodes)), None) if tie == "order" else (None, ties)
    started = time.perf_counter()
    log = replay(nodes, sequence, strategy, FragModel(workload), rng=rng, rank=rank)
    window = strategy.window if isinstance(strategy, JointStrategy) else 1
    return {"strategy": label, "seed": seed, "trace": trace, "variant": variant, "pods": len(sequence),
            "window": window, "placed": int(log.placed.sum()), "alloc_pct": alloc_curve(log), "frag_pct": frag_curve(log),
            "frag_of_idle_pct": frag_ratio_curve(log), "wall_s": round(time.perf_counter() - started, 2),
            "plan_ms": [round(1000 * t, 1) for t in times], **({"cpsat": strategy.stats} if hasattr(strategy, "stats") else {})}


def published(data_dir: Path, trace: str) -> dict[tuple[str, str, int], float]:
    """(policy, metric, level) → published median, for `trace`."""
    path = data_dir / "published_results_default.csv"
    out = {}
    if path.exists():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row["workload"] == Path(trace).stem:
                    out[(row["policy"], row["metric"], int(row["arrived_pct_of_gpu_capacity"]))] = float(row["median"])
    return out


def summary(results: list[dict], reference: dict, wall: float) -> str:
    """A table of medians over seeds, next to the published medians."""
    lines = ["", f"{'strategy':<10} {'seeds':>5} {'alloc@90':>9} {'alloc@100 median':>17} {'[min, max]':>16} "
                 f"{'alloc@130':>10} {'frag@100':>9} {'published@100':>14} {'s/run':>6}"]
    for name in dict.fromkeys(r["strategy"] for r in results):
        runs = [r for r in results if r["strategy"] == name]
        at = lambda level, key="alloc_pct": statistics.median(r[key][level] for r in runs)  # noqa: E731
        hundred = [r["alloc_pct"][100] for r in runs]
        ref = reference.get((PUBLISHED_NAMES.get(name, ""), "alloc_ratio_pct", 100))
        lines.append(f"{name:<10} {len(runs):>5} {at(90):>9.2f} {at(100):>17.2f} "
                     f"{f'[{min(hundred):.2f}, {max(hundred):.2f}]':>16} {at(130):>10.2f} "
                     f"{at(100, 'frag_pct'):>9.2f} {(f'{ref:.2f}' if ref else '-'):>14} "
                     f"{statistics.mean(r['wall_s'] for r in runs):>6.1f}")
    lines += plan_times(results)
    others = sorted({p for p, m, lvl in reference if m == "alloc_ratio_pct"})
    if others:
        lines.append("published medians @100 %: " + ", ".join(
            f"{p} {reference[(p, 'alloc_ratio_pct', 100)]:.2f}" for p in others))
    lines.append(f"total wall time {wall:.1f} s")
    return "\n".join(lines)


def plan_times(results: list[dict]) -> list[str]:
    """Per joint strategy: its wall time per window planned, p50 and p99 over every seed's windows."""
    out = []
    for name in dict.fromkeys(r["strategy"] for r in results if r.get("plan_ms")):
        ms = [t for r in results if r["strategy"] == name for t in r["plan_ms"]]
        out.append(f"{name}: plan per window p50 {np.percentile(ms, 50):.0f} ms, p99 {np.percentile(ms, 99):.0f} ms"
                   f" ({len(ms)} windows)")
    return out


def variant_summary(results: list[dict], wall: float) -> str:
    """One row per variant: median allocation @100 % per strategy and the
    margin of each strategy over fgd (points)."""
    names = list(dict.fromkeys(r["strategy"] for r in results))
    margins = [n for n in names if n != "fgd"] if "fgd" in names else []
    median = lambda v, n: statistics.median(  # noqa: E731
        r["alloc_pct"][100] for r in results if r["variant"] == v and r["strategy"] == n)
    seeds = len({r["seed"] for r in results})
    width = {n: max(10, len(n) + 2) for n in names}
    head = f"{'variant':<10}" + "".join(f"{n:>{width[n]}}" for n in names) \
        + "".join(f"{n + '−fgd':>{width[n] + 4}}" for n in margins)
    lines = ["", f"GPU allocation at 100 % arrived, median of {seeds} seeds", head]
    for v in dict.fromkeys(r["variant"] for r in results):
        row = {n: median(v, n) for n in names}
        lines.append(f"{v:<10}" + "".join(f"{row[n]:>{width[n]}.2f}" for n in names)
                     + "".join(f"{row[n] - row['fgd']:>+{width[n] + 4}.2f}" for n in margins))
    lines += plan_times(results)
    lines.append(f"total wall time {wall:.1f} s")
    return "\n".join(lines)


def protocol(results: list[dict]) -> str:
    """The protocol each strategy was measured by, said beside its figures."""
    windows = {r["strategy"]: r["window"] for r in results if r["strategy"] != BOUND}
    joint = [f"{name} decides per window of {w} arrivals" for name, w in windows.items() if w > 1]
    return "protocol: " + ("; ".join(joint) + "; the others per arrival" if joint else "every strategy per arrival")


def seed_table(results: list[dict]) -> str:
    """Per (variant, seed): each strategy's allocation at 100 % arrived, the
    bound, and each strategy's margin over the first; then per variant the
    margins' median and range."""
    names = [n for n in dict.fromkeys(r["strategy"] for r in results) if n != BOUND]
    first, others = names[0], names[1:]
    at = {(r["variant"], r["seed"], r["strategy"]): r["alloc_pct"][100] for r in results}
    has_bound = any(r["strategy"] == BOUND for r in results)
    width = {n: max(10, len(n) + 2) for n in names}
    head = (f"{'variant':<10}{'seed':>6}" + "".join(f"{n:>{width[n]}}" for n in names)
            + (f"{'bound':>8}" if has_bound else "") + "".join(f"{n + '−' + first:>{width[n] + len(first) + 2}}"
                                                              for n in others))
    lines = ["", f"GPU allocation at 100 % arrived, seed by seed ({protocol(results)})", head]
    spans: list[str] = []
    for v in dict.fromkeys(r["variant"] for r in results):
        seeds = sorted({r["seed"] for r in results if r["variant"] == v})
        for seed in seeds:
            row = f"{str(v or 'default'):<10}{seed:>6}" + "".join(f"{at[(v, seed, n)]:>{width[n]}.2f}" for n in names)
            if has_bound:
                row += f"{at.get((v, seed, BOUND), float('nan')):>8.2f}"
            row += "".join(f"{at[(v, seed, n)] - at[(v, seed, first)]:>+{width[n] + len(first) + 2}.2f}" for n in others)
            lines.append(row)
        for n in others:
            margins = [at[(v, s, n)] - at[(v, s, first)] for s in seeds]
            ranges = [at[(v, s, x)] for s in seeds for x in (first, n)]
            overlap = max(at[(v, s, first)] for s in seeds) >= min(at[(v, s, n)] for s in seeds)
            spans.append(f"{str(v or 'default'):<10} {n}−{first}: median {statistics.median(margins):+.2f}, "
                         f"[{min(margins):+.2f}, {max(margins):+.2f}]; seed ranges "
                         f"{'overlap' if overlap else 'do not overlap'} ({min(ranges):.2f}..{max(ranges):.2f})")
    return "\n".join(lines + [""] + spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="run seeds 0..N-1")
    parser.add_argument("--seed-base", type=int, default=0)
    parser.add_argument("--strategies", nargs="+", default=["best-fit", "fgd", "fgd-cpu"])
    parser.add_argument("--data-dir", type=Path, default=DATA)
    parser.add_argument("--trace", default="openb_pod_list_default.csv")
    parser.add_argument("--nodes", default="openb_node_list_gpu_node.csv")
    parser.add_argument("--ratio", type=float, default=1.3)
    parser.add_argument("--tie", choices=["order", "random"], default="order")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--variants", nargs="*", choices=list(BY_NAME), default=None,
                        help="replay generated stress variants of the trace (no names: all)")
    parser.add_argument("--bound", action="store_true",
                        help="add the upper bound at 100 %% arrived and a seed-by-seed table")
    args = parser.parse_args()
    for label in args.strategies:
        try:
            name, _ = parse_label(label)
        except ValueError as err:
            parser.error(str(err))
        if name not in GPU_STRATEGIES:
            parser.error(f"unknown strategy {name!r}; known: {', '.join(sorted(GPU_STRATEGIES))}")
    variants = [None] if args.variants is None else (args.variants or [v.name for v in VARIANTS])
    labels = [*args.strategies, *([BOUND] if args.bound else [])]
    jobs = [(name, seed, str(args.data_dir), args.trace, args.nodes, args.ratio, args.tie, variant)
            for variant in variants for name in labels
            for seed in range(args.seed_base, args.seed_base + args.seeds)]
    started = time.perf_counter()
    results = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for result in pool.map(run_one, jobs):
            print(json.dumps(result), flush=True)
            results.append(result)
    strategies = [r for r in results if r["strategy"] != BOUND]
    if args.variants is None:
        print(summary(strategies, published(args.data_dir, args.trace), time.perf_counter() - started))
    else:
        print(variant_summary(strategies, time.perf_counter() - started))
    print(protocol(results))
    if args.bound or len(args.strategies) > 1:
        print(seed_table(results))


if __name__ == "__main__":
    main()
