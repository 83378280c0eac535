"""The `tidal` command: error paths give one line and the right exit code;
events published from a file can be tailed back from a real NATS server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, patience
from tidal_cli.main import main

TIDAL = [sys.executable, "-m", "tidal_cli.main"]


def tidal(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*TIDAL, *args], capture_output=True, text=True, timeout=patience(timeout),
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def _one_line_error(result: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize("content, suffix, fragments", [
    ('{"type": "pod.lifecycle", "payload": {"namespace": "a", "name": "b", "phase": "pending", '
     '"created_at": "2026-01-01T00:00:00Z", "requests": {"cpu_milli": "lots"}}}', ".json",
     ["field 'payload.requests.cpu_milli'", "valid integer"]),
    ('[{"type": "node.metrics", "payload": {"node": "n", "sampled_at": "2026-01-01T00:00:00Z", "interval_s": 10}},'
     ' {"type": "node.metrics", "payload": {"node": "n"}}]', ".json", ["event 2", "field 'payload.sampled_at'"]),
    ("type: no.such.event\npayload: {}\n", ".yaml", ["unknown event type 'no.such.event'"]),
    ("{broken", ".json", ["not valid JSON"]),
    ("key: [unclosed\n", ".yaml", ["not valid YAML"]),
    ("", ".yaml", ["no events in the file"]),
])
def test_publish_rejects_invalid_files_before_publishing(tmp_path, content, suffix, fragments):
    path = tmp_path / f"events{suffix}"
    path.write_text(content)
    # no broker is reachable at this URL: validation must fail before any connection
    _one_line_error(tidal("events", "publish", str(path), "--bus", "nats://127.0.0.1:1"), 2, *fragments)


def test_publish_missing_file(tmp_path):
    _one_line_error(tidal("events", "publish", str(tmp_path / "none.json")), 2, "No such file")


def test_unreachable_bus_is_one_line(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("type: node.metrics\npayload: {node: n1, sampled_at: '2026-01-01T00:00:00Z', interval_s: 10}\n")
    _one_line_error(tidal("events", "publish", str(path), "--bus", "nats://127.0.0.1:1"), 1, "cannot connect to NATS")


def test_usage_errors(tmp_path):
    _one_line_error(tidal("events", "tail", "no.such.stream", "--no-follow"), 2, "unknown stream 'no.such.stream'")
    _one_line_error(tidal("events", "tail", "node.metrics", "--from", "yesterday"), 2, "--from")
    _one_line_error(tidal("run", "no-such-service"), 2, "unknown service 'no-such-service'")
    _one_line_error(tidal("frobnicate"), 2, "invalid choice")
    _one_line_error(tidal("events", "publish", "x", "--bus", "amqp://h:1"), 2, "No such file")


def test_schemas_check(tmp_path):
    assert tidal("schemas", "check").returncode == 0
    (tmp_path / "schemas").mkdir()
    _one_line_error(tidal("schemas", "check", "--dir", str(tmp_path / "schemas")), 1, "drifted", "missing")
    assert tidal("schemas", "export", "--dir", str(tmp_path / "schemas")).returncode == 0
    assert tidal("schemas", "check", "--dir", str(tmp_path / "schemas")).returncode == 0


def test_publish_then_tail_round_trip(tmp_path, nats_server, namespace):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "- type: node.metrics\n  payload: {node: alpha, sampled_at: '2026-01-01T00:00:00Z', interval_s: 10,"
        " numa_load: {0: 0.25}}\n"
        "- type: node.metrics\n  cluster: east\n  payload: {node: 'beta.example.com', sampled_at: "
        "'2026-01-01T00:00:10Z', interval_s: 10}\n")
    bus = ["--bus", nats_server.url, "--namespace", namespace]
    published = tidal("events", "publish", str(path), *bus)
    assert published.returncode == 0, published.stderr
    assert "published 2 event(s)" in published.stdout
    tailed = tidal("events", "tail", "node.metrics", "--from", "earliest", "--no-follow", *bus)
    assert tailed.returncode == 0, tailed.stderr
    assert "node.metrics v1  cluster=default key=alpha" in tailed.stdout
    assert "cluster=east key=beta.example.com" in tailed.stdout
    assert "numa_load: {'0': 0.25}" in tailed.stdout
    limited = tidal("events", "tail", "node.metrics", "--from", "2", "--no-follow", *bus)
    assert "alpha" not in limited.stdout and "beta.example.com" in limited.stdout


def test_help_everywhere(capsys):
    # the real entry point once; the same `main` in this process for the rest (a process costs a second of CPU)
    result = tidal("--help")
    assert result.returncode == 0 and "usage: tidal" in result.stdout
    for args in (["events", "--help"], ["events", "tail", "--help"], ["schemas", "export", "--help"],
                 ["up", "--help"], ["demo", "--help"]):
        assert main(args) == 0, args
        assert "usage: tidal" in capsys.readouterr().out, args


def test_cpus_pick_through_tidal(tmp_path):
    topology = tmp_path / "topo.json"
    # 2 NUMA nodes x 1 core x 2 threads
    topology.write_text('[{"cpu":0,"core":0,"socket":0,"numa":0},{"cpu":1,"core":0,"socket":0,"numa":0},'
                        '{"cpu":2,"core":1,"socket":0,"numa":1},{"cpu":3,"core":1,"socket":0,"numa":1}]')
    spread = tidal("cpus", "pick", "--topology", str(topology), "--available", "0-3", "--count", "2",
                   "--policy", "spread")
    assert spread.returncode == 0 and spread.stdout.strip() == "[0, 2]"
    packed = tidal("cpus", "pick", "--topology", str(topology), "--available", "0-3", "--count", "2")
    assert packed.stdout.strip() == "[0, 1]"  # one whole core before breaking into another
    _one_line_error(tidal("cpus", "pick", "--topology", str(topology), "--available", "0-3", "--count", "9"),
                    1, "requested 9, available 4")
    _one_line_error(tidal("cpus", "pick", "--topology", str(topology), "--available", "0-x", "--count", "1"), 2)


def test_fairshare_trace_through_tidal(tmp_path):
    usage = tmp_path / "usage.csv"
    usage.write_text("t,usage\n0,1\n400,1\n")
    result = tidal("fairshare", "trace", "--adjust-time", "100s", "--period", "100s", "--usage", str(usage))
    rows = [line.split(",") for line in result.stdout.strip().splitlines()]
    assert rows[0] == ["t", "usage", "score"]
    # after one adjust time T the score is 1 - e^-1 = 0.632 of the step
    assert abs(float(rows[2][2]) - 0.6321) < 1e-3
    _one_line_error(tidal("fairshare", "trace", "--adjust-time", "0s", "--period", "1s", "--usage", str(usage)), 2)


def test_tenants_apply(tmp_path, nats_server, namespace):
    bus = ["--bus", nats_server.url, "--namespace", namespace]
    applied = tidal("tenants", "apply", str(ROOT / "examples/tenants.yaml"), *bus)
    assert applied.returncode == 0, applied.stderr
    assert "applied 2 tenant(s): team-vision, team-speech" in applied.stdout
    tailed = tidal("events", "tail", "tenant.config", "--from", "earliest", "--no-follow", *bus)
    assert "key=team-vision" in tailed.stdout and "a100-pool" in tailed.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("- tenant: a\n  quota: {A100: lots}\n")
    _one_line_error(tidal("tenants", "apply", str(bad), *bus), 2, "tenant", "field 'quota.A100'")
    both = tmp_path / "both.yaml"
    both.write_text("tenant: a\ngroups: [{name: g, bindings: [{node: n, gpus: [x]}]}]\nauto_grouping: {}\n")
    _one_line_error(tidal("tenants", "apply", str(both), *bus), 2, "either groups (manual) or auto_grouping")
