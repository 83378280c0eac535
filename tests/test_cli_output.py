"""The CLI as kubectl habits expect it: `--version`; `-o table|json|yaml`
on every read command, json and yaml parsed back and their fields checked
against what was put in; the cluster default that the manifests use; and
failures that are one line, never a traceback.

Each bus test runs the command in-process (`tidal_cli.main.main`) against
the embedded NATS server (or each broker in turn), in its own namespace."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import make_bus
from test_cli import tidal
from test_replay import recorded_run  # noqa: F401  (40 pods placed by the real placement, recorded)
from tidal_cli import main as cli
from tidal_cli.output import render
from tidal_runtime.settings import DEFAULT_CLUSTER, ServiceSettings

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("- type: node.metrics\n  payload: {node: alpha, sampled_at: '2026-01-01T00:00:00Z', interval_s: 10,"
           " numa_load: {0: 0.25}}\n"
           "- type: node.metrics\n  cluster: east\n  payload: {node: beta, sampled_at: '2026-01-01T00:00:10Z',"
           " interval_s: 10}\n")
TENANTS = ("- tenant: team-a\n  quota: {A100: 2000}\n  permissions: {nodes: [n1, n2]}\n"
           "- tenant: team-b\n  quota: {cpu: 4000}\n")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ensure_streams(url: str, namespace: str) -> None:
    """Every stream, as the services would have made them (reading commands only read)."""
    async def make() -> None:
        async with make_bus(url, namespace) as bus:
            await bus.ensure_streams()

    asyncio.run(make())


def test_version_is_the_installed_packages_one_line_exit_0():
    from importlib.metadata import version

    done = tidal("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tidal {version('tidal')}\n"


def test_the_cluster_default_is_the_manifests_everywhere(monkeypatch):
    maps = {d["metadata"]["name"]: d for d in yaml.safe_load_all((ROOT / "k8s/base/config/configmap.yaml").read_text())}
    assert DEFAULT_CLUSTER == maps["tidal-bus"]["data"]["cluster"] == "default"
    monkeypatch.delenv("TIDAL_CLUSTER", raising=False)
    assert ServiceSettings().cluster == DEFAULT_CLUSTER
    parser = cli.build_parser()
    for argv in (["explain", "a/b"], ["audit"], ["events", "tail", "pod.lifecycle"], ["tenants", "list"], ["up"]):
        assert parser.parse_args(argv).cluster == DEFAULT_CLUSTER, argv
    from tidal_cli.stack import Stack

    assert Stack(ROOT / ".unused").cluster == DEFAULT_CLUSTER


def test_events_tail_json_is_one_object_a_line_and_yaml_documents(tmp_path, capsys, bus_url, namespace):
    path = tmp_path / "metrics.yaml"
    path.write_text(METRICS)
    bus = ["--bus", bus_url, "--namespace", namespace]
    assert run(capsys, "events", "publish", str(path), *bus)[0] == 0
    code, out, err = run(capsys, "events", "tail", "node.metrics", "--from", "earliest", "--no-follow",
                         "-o", "json", *bus)
    assert code == 0, err
    # Kafka's partitions keep no order between the two keys: sorted by node
    lines = sorted((json.loads(line) for line in out.splitlines()), key=lambda e: e["event"]["payload"]["node"])
    assert [(e["event"]["cluster"], e["event"]["payload"]["node"]) for e in lines] == [
        (DEFAULT_CLUSTER, "alpha"), ("east", "beta")]
    assert lines[0]["event"]["type"] == "node.metrics" and lines[0]["event"]["payload"]["numa_load"] == {"0": 0.25}
    assert all(isinstance(e["position"], int) for e in lines)
    code, out, _ = run(capsys, "events", "tail", "node.metrics", "--from", "earliest", "--no-follow",
                       "-o", "yaml", *bus)
    documents = sorted(yaml.safe_load_all(out), key=lambda e: e["event"]["payload"]["node"])
    assert [d["event"]["payload"]["node"] for d in documents] == ["alpha", "beta"]
    assert documents == lines  # the same facts either way
    code, out, _ = run(capsys, "events", "tail", "node.metrics", "--from", "earliest", "--no-follow", *bus)
    assert f"cluster={DEFAULT_CLUSTER} key=alpha" in out  # the table stays the default


def test_audit_json_and_yaml_parse_back(capsys, nats_server, namespace):
    ensure_streams(nats_server.url, namespace)
    bus = ["--bus", nats_server.url, "--namespace", namespace, "--cluster", "c9"]
    code, out, err = run(capsys, "audit", "-o", "json", *bus)
    assert code == 0, err
    assert json.loads(out) == {"cluster": "c9", "violations": []}
    code, out, _ = run(capsys, "audit", "-o", "yaml", *bus)
    assert yaml.safe_load(out) == {"cluster": "c9", "violations": []}
    code, out, _ = run(capsys, "audit", *bus)
    assert out == "invariant violations: 0\n"


def test_tenants_list_shows_what_is_in_force(tmp_path, capsys, nats_server, namespace):
    path = tmp_path / "tenants.yaml"
    path.write_text(TENANTS)
    bus = ["--bus", nats_server.url, "--namespace", namespace]
    assert run(capsys, "tenants", "apply", str(path), *bus)[0] == 0
    assert run(capsys, "tenants", "delete", "team-b", *bus)[0] == 0
    code, out, err = run(capsys, "tenants", "list", "-o", "json", *bus)
    assert code == 0, err
    listed = json.loads(out)
    assert listed["cluster"] == DEFAULT_CLUSTER
    assert [t["tenant"] for t in listed["items"]] == ["team-a"]  # team-b was deleted
    assert listed["items"][0]["quota"] == {"A100": 2000}
    assert listed["items"][0]["permissions"]["nodes"] == ["n1", "n2"]
    assert yaml.safe_load(run(capsys, "tenants", "list", "-o", "yaml", *bus)[1]) == listed
    table = run(capsys, "tenants", "list", *bus)[1].splitlines()
    assert table[0].split() == ["TENANT", "QUOTA", "GROUPS", "NODES", "GPUS"]
    assert table[1].split() == ["team-a", "A100=2000", "-", "n1,n2", "any"]
    other = run(capsys, "tenants", "list", "-o", "json", *bus, "--cluster", "elsewhere")[1]
    assert json.loads(other)["items"] == []


def test_fairshare_trace_json_has_the_csvs_rows(tmp_path, capsys):
    usage = tmp_path / "usage.csv"
    usage.write_text("t,usage\n0,1\n7200,0\n")
    args = ["fairshare", "trace", "--adjust-time", "1h", "--period", "1h", "--usage", str(usage)]
    code, csv_out, _ = run(capsys, *args)
    assert code == 0
    rows = [line.split(",") for line in csv_out.splitlines()[1:]]
    code, out, err = run(capsys, *args, "-o", "json")
    assert code == 0, err
    items = json.loads(out)["items"]
    assert [(i["t"], i["usage"]) for i in items] == [(float(t), float(u)) for t, u, _ in rows]
    assert [i["score"] for i in items] == [float(s) for _, _, s in rows]
    assert yaml.safe_load(run(capsys, *args, "-o", "yaml")[1]) == {"items": items}


def test_node_audit_takes_o_json_yaml_and_still_json(tmp_path, capsys):
    cgroups = tmp_path / "cg"
    (cgroups / "cpuset/kubepods").mkdir(parents=True)
    args = ["node", "audit", "--state-file", str(tmp_path / "books.json"), "--cgroup-root", str(cgroups),
            "--cgroup-parent", "kubepods", "--cgroup-version", "v1", "--numa-override", "0:0"]
    code, old, err = run(capsys, *args, "--json")
    assert code == 0, err
    report = json.loads(old)
    assert report["violations"] == [] and set(report["counts"]) >= {"double-booked", "leaked"}
    assert json.loads(run(capsys, *args, "-o", "json")[1]) == report
    assert yaml.safe_load(run(capsys, *args, "-o", "yaml")[1]) == report
    assert run(capsys, *args)[1].startswith("node audit of ")


def test_up_status_json(tmp_path, capsys):
    status = {"supervisor_pid": None, "bus": "nats://127.0.0.1:1",
              "processes": {"placement": {"pid": 12, "running": True, "restarts": 2, "last_exit": None}}}
    from tidal_cli.stack import STATUS_FILE

    (tmp_path / STATUS_FILE).write_text(json.dumps(status))
    code, out, err = run(capsys, "up", "--status", "--data-dir", str(tmp_path), "-o", "json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["running"] is False and shown["bus"] == "nats://127.0.0.1:1"
    assert shown["processes"]["placement"] == {"pid": 12, "running": False, "restarts": 2, "last_exit": None}


def test_replay_json_is_its_report_document(nats_server, recorded_run, tmp_path, capsys):  # noqa: F811
    namespace, _ = recorded_run
    path = tmp_path / "replay.json"
    code, out, err = run(capsys, "replay", "--bus", nats_server.url, "--namespace", namespace, "--cluster", "sim",
                         "--from", "earliest", "-o", "json", "--report", str(path))
    assert code == 0, err
    document = json.loads(out)  # stdout holds the document only: the file's name went to stderr
    assert document == json.loads(path.read_text()) and document["exact"]["equal"] is True
    assert f"report: {path}" in err
    code, out, _ = run(capsys, "replay", "--bus", nats_server.url, "--namespace", namespace, "--cluster", "sim",
                       "--from", "earliest", "-o", "yaml")
    assert code == 0 and yaml.safe_load(out) == document


@pytest.mark.parametrize("argv, words", [
    (["audit", "-o", "xml"], "invalid choice: 'xml'"),
    (["events", "tail", "no.such", "-o", "json", "--bus", "nats://127.0.0.1:1"], "unknown stream 'no.such'"),
    (["tenants", "list", "-o", "json", "--bus", "nats://127.0.0.1:1", "--connect-timeout", "0.5"], "tidal: "),
    (["explain", "a/b", "-o", "yaml", "--bus", "nats://127.0.0.1:1", "--connect-timeout", "0.5"], "tidal: "),
])
def test_failures_are_one_line_never_a_traceback(argv, words):
    done = subprocess.run([sys.executable, "-m", "tidal_cli.main", *argv], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode != 0 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_render_refuses_a_format_that_is_not_a_document():
    assert json.loads(render({"a": [1]}, "json")) == {"a": [1]}
    with pytest.raises(ValueError, match="table"):
        render({}, "table")
