"""The placement benchmarks measure what users run: `--strategy` defaults to
the placement service's own default, several strategies run in one process
with their speed ratio, strategies with options are understood, and a bad
name exits 2 with one line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidal_placement.settings import PlacementSettings
from conftest import patience

REPO = Path(__file__).resolve().parents[1]
SERVICE_DEFAULT = PlacementSettings.model_fields["gpu_strategy"].default


def bench(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("libs", "services", "bench"))}
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args], capture_output=True, text=True,
                          timeout=patience(120), env=env, cwd=REPO)


def test_placement_policy_defaults_to_the_service_strategy():
    done = bench("placement_policy.py", "--nodes", "60", "--pods", "40")
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert row["strategy"] == SERVICE_DEFAULT == "fgd-cpu"
    assert row["pods"] == 40 and row["pods_per_s"] > 0
    # and it relearns the target workload as the service does
    assert row["relearn"] == PlacementSettings.model_fields["workload_refresh"].default == 500


def test_placement_policy_compares_strategies_in_one_run():
    # learnt once, as the plain reference is, so both decide against one target
    done = bench("placement_policy.py", "--nodes", "60", "--pods", "40", "--strategy", "fgd-cpu", "best-fit",
                 "--reference", "--relearn", "0")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r.get("strategy") for r in rows[:3]] == ["fgd-cpu", "best-fit", "fgd-cpu (reference)"]
    assert [r["relearn"] for r in rows[:3]] == [0, 0, 0]
    # the cached and the plain strategy place the same pods
    assert rows[0]["placed"] == rows[2]["placed"]
    ratio = rows[3]
    assert ratio["relative_to"] == "fgd-cpu" and set(ratio["pods_per_s_ratio"]) == {"best-fit", "fgd-cpu (reference)"}
    assert ratio["pods_per_s_ratio"]["best-fit"] == pytest.approx(rows[1]["pods_per_s"] / rows[0]["pods_per_s"],
                                                                  abs=1e-3)


def test_placement_policy_times_by_cpu_when_asked():
    # on a shared machine the thread's CPU time leaves out the time spent preempted
    done = bench("placement_policy.py", "--nodes", "60", "--pods", "40", "--clock", "cpu")
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert row["clock"] == "cpu" and row["pods"] == 40 and row["pods_per_s"] > 0


def test_placement_policy_varies_the_pod_shapes_when_asked():
    rows = [json.loads(bench("placement_policy.py", "--nodes", "60", "--pods", "400", *args).stdout)
            for args in ([], ["--cpu-values", "60"])]
    assert rows[0]["shapes"] <= 56 < rows[1]["shapes"]


def test_placement_policy_relearns_as_the_service_does():
    drift = PlacementSettings.model_fields["workload_drift"].default
    rows = [json.loads(bench("placement_policy.py", "--nodes", "60", "--pods", "2100", *args).stdout)
            for args in ([], ["--drift", "0"])]
    assert rows[0]["drift"] == drift and rows[1]["drift"] == 0
    # due after pods 1, 2, 4 … 256, 501, 1001, 1501 and 2001: every time without a tolerance (a
    # mix of 56 shapes never repeats exactly), fewer with one once the mix has settled
    assert rows[1]["rebuilds"] == 13 and 9 <= rows[0]["rebuilds"] < 13


@pytest.mark.parametrize("script, args, fragment", [
    ("placement_policy.py", ["--strategy", "nope"], "unknown strategy 'nope'"),
    ("placement_openb.py", ["--strategies", "fgd", "nope"], "unknown strategy 'nope'"),
    ("placement_openb.py", ["--strategies", "fgd-cpu:packing"], "'packing' is not key=value"),
    ("placement_policy.py", ["--drift", "1.5"], "--drift takes a share of the pods between 0 and 1"),
    ("placement_policy.py", ["--cpu-values", "1"], "--cpu-values takes 2 to 296"),
    ("openb_online_workload.py", ["--tolerance", "0", "-0.1"], "--tolerance takes shares of the pods between 0 and 1"),
])
def test_a_bad_strategy_or_setting_exits_2_with_one_line(script, args, fragment):
    done = bench(script, *args)
    assert done.returncode == 2
    assert done.stdout == "" and fragment in done.stderr.splitlines()[-1]
    assert "Traceback" not in done.stderr


def test_strategy_labels_carry_options():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from placement_openb import parse_label
    finally:
        sys.path.remove(str(REPO / "bench"))
    assert parse_label("fgd") == ("fgd", {})
    assert parse_label("fgd-cpu:packing=true,rho_scale=0.5,deficit_unit=100,target=typical") == (
        "fgd-cpu", {"packing": True, "rho_scale": 0.5, "deficit_unit": 100, "target": "typical"})


def test_the_burst_says_why_pods_were_left_pending():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from burst import pending_filtered
    finally:
        sys.path.remove(str(REPO / "bench"))
    assert pending_filtered([{"cpu": 10, "gpu": 2}, {"cpu": 20, "stale: no metrics for 30s": 4}]) == {
        "cpu": 15.0, "stale: no metrics for 30s": 2.0, "gpu": 1.0}  # the filter taking out most nodes first


def test_policy_ab_compares_the_work_tree_with_a_commit_on_the_same_pods():
    # HEAD's package against the work tree's: a ratio of two runs, and the same node for every pod
    # (the tree may differ from HEAD, but never in its decisions: a speed change keeps them)
    done = bench("policy_ab.py", "HEAD", "--nodes", "60", "--pods", "120", "--chunk", "25")
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert row["base"] == "HEAD" and row["strategy"] == SERVICE_DEFAULT and row["pods"] == 120
    assert set(row["pods_per_s"]) == {"work_tree", "base"} and min(row["pods_per_s"].values()) > 0
    assert row["ratio"] == pytest.approx(row["pods_per_s"]["work_tree"] / row["pods_per_s"]["base"], abs=1e-3)
    assert row["same_decisions"] is True


def test_policy_ab_names_a_commit_it_cannot_read_in_one_line():
    done = bench("policy_ab.py", "no-such-commit-anywhere", "--nodes", "10", "--pods", "10")
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "no-such-commit-anywhere" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_openb_bench_sets_joint_beside_the_per_pod_default_and_the_bound_seed_by_seed():
    sample = REPO / "tests" / "fixtures" / "openb_sample"
    done = bench("placement_openb.py", "--data-dir", str(sample), "--trace", "pod_list.csv", "--nodes",
                 "node_list.csv", "--seeds", "2", "--strategies", "fgd-cpu", "joint:window=4", "--bound",
                 "--jobs", "1")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {(r["strategy"], r.get("window")) for r in rows} == {("fgd-cpu", 1), ("joint:window=4", 4), ("bound", None)}
    assert sorted(r["seed"] for r in rows if r["strategy"] == "bound") == [0, 1]
    # the bound is over the lines the strategies' figure averages: where the sample has none at 100 %
    # (its few large pods step past it), neither has a figure; its value is tests/test_openb_bound.py's
    for seed in (0, 1):
        at = {r["strategy"]: r["alloc_pct"]["100"] for r in rows if r["seed"] == seed}
        assert math.isnan(at["bound"]) == math.isnan(at["fgd-cpu"]) == math.isnan(at["joint:window=4"])
        assert math.isnan(at["bound"]) or at["bound"] >= max(at["fgd-cpu"], at["joint:window=4"])
    assert "protocol: joint:window=4 decides per window of 4 arrivals; the others per arrival" in done.stdout
    assert "seed by seed" in done.stdout and "joint:window=4−fgd-cpu" in done.stdout
