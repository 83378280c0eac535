"""The per-event benchmarks run and print their figures: `bench/bus_read.py`
reads every published event on each path, `bench/oversell_sample.py`
handles every sample, `bench/tenant_usage.py` finds the kept tenant usage
equal to the full pass, `bench/cluster_pods.py`'s bridge, services and real
node agent catch up with the cluster's running pods, the agent counting its
own, `bench/sample_cost.py` counts the samples' CPU with the stages named
(the figures themselves are the benchmarks', not a test's)."""

from __future__ import annotations

import json

from test_bench_placement_cli import bench


def test_bus_read_reads_every_event_on_each_path():
    done = bench("bus_read.py", "--nodes", "200")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["path"] for r in rows] == ["follower", "group", "group-window", "relay", "relay-window", "pods",
                                         "pods-main-lane"]
    assert all(r["events"] == 200 and r["cpu_us_per_event"] >= 0 for r in rows)
    assert all(r["cpu_us_per_event"] > 0 for r in rows if r["path"] != "pods-main-lane")  # sent none of them


def test_oversell_sample_handles_every_sample_with_running_pods_known():
    done = bench("oversell_sample.py", "--nodes", "50", "--pods", "400", "--samples", "50")
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert (row["nodes"], row["running_pods"], row["samples"]) == (50, 400, 50) and row["cpu_us_per_sample"] > 0


def test_tenant_usage_compares_the_kept_usage_with_the_full_pass():
    done = bench("tenant_usage.py", "--nodes", "40", "--pods", "300", "--tenants", "3")
    assert done.returncode == 0, done.stderr  # it exits non-zero when the two usages differ
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert (row["nodes"], row["pods"], row["tenants"]) == (40, 300, 3)
    assert row["full_pass_ms"] > 0 and row["ledger_ms"] >= 0 and row["hold_us_per_pod"] > 0


def test_cluster_pods_runs_the_bridge_services_and_a_real_agent_through_the_clusters_pods():
    done = bench("cluster_pods.py", "--pods", "300", "--nodes", "10")
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert (row["cluster_pods"], row["nodes"], row["pods_here"]) == (300, 10, 30)
    processes = {"placement", "scoring", "oversell", "remediation", "bridge", "node agent"}
    assert set(row["rss_mib"]) == set(row["peak_rss_mib"]) == processes
    assert all(row["peak_rss_mib"][p] >= row["rss_mib"][p] > 0 for p in processes)


def test_sample_cost_counts_every_process_of_the_stages_named_and_the_agents():
    # three rounds of every node's samples: as many samples measured on any machine, however slow
    done = bench("sample_cost.py", "--nodes", "20", "--interval", "0.5", "--rounds", "3", "--stages", "oversell")
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert (row["nodes"], row["stages"]) == (20, ["oversell"]) and row["samples"] == 60
    assert set(row["cpu_us_per_sample"]) == {"oversell", "nats-server", "bench agents"}
