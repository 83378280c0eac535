"""`bench/bus_read.py` reads every published event on each path and prints
one figure per path (the figure itself is the benchmark's, not a test's)."""

from __future__ import annotations

import json

from test_bench_placement_cli import bench


def test_bus_read_reads_every_event_on_each_path():
    done = bench("bus_read.py", "--nodes", "200")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["path"] for r in rows] == ["follower", "group", "relay"]
    assert all(r["events"] == 200 and r["cpu_us_per_event"] > 0 for r in rows)
