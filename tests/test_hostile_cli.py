"""Hostile and careless input to every CLI (issue 17, items 3-5).

For each command that reads a file, a bomb of each kind, run as the real
`tidal` process: exit 2 with one line naming the file, within a second of
CPU and under 200 MiB of memory (both measured on the child by wait4). Then
typos that must not pass silently, and every numeric and named option fed
what an operator mistypes: one line naming the option, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, patience
from tidal_cli.main import build_parser, main

TIDAL = [sys.executable, "-m", "tidal_cli.main"]
NO_BUS = ["--bus", "nats://127.0.0.1:1", "--connect-timeout", "0.5"]
MIB = 1 << 20

def _laughs(levels: int = 8) -> str:
    """A billion laughs, anchors under `x:`: 10**levels strings from 500 bytes."""
    names = "abcdefghij"[:levels + 1]
    return "x:\n  a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
        f"  {c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip(names, names[1:]))


# Each file is what the command expects, with the bomb where it is walked: the
# expanded aliases as a list the schema validates item by item.
SHAPES = {
    "tenants": ("tenant: t\npermissions:\n  nodes: {bomb}\n", "tenant: t\nquota: {cpu: 1}\nquota: {}\n"),
    "events": ("type: node.metrics\npayload:\n  node: n\n  sampled_at: '2026-01-01T00:00:00Z'\n  interval_s: 10\n"
               "  pods: {bomb}\n",
               "type: node.metrics\ntype: node.topology\npayload: {node: n}\n"),
    "simulate": ("nodes: {bomb}\npods: [{name: p}]\n", "nodes: [{name: n}]\nnodes: []\npods: [{name: p}]\n"),
}


def _bombs(command: str, kind: str) -> dict[str, tuple[bytes, str]]:
    """name -> (file content, what the one-line error must say)."""
    if kind == "json":
        return {"oversized": (b" " * (3 * MIB) + b"{}", "TIDAL_CLI_MAX_FILE_BYTES"),
                "deep nesting": (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
                "huge number": (b'{"type": "node.metrics", "payload": {"interval_s": ' + b"9" * 1_000_000 + b"}}",
                                "digits"),
                "duplicate keys": (b'{"type": "node.metrics", "type": "node.topology", "payload": {}}',
                                   "duplicate key 'type'"),
                "NaN": (b'{"type": "node.metrics", "payload": {"node": "n", "interval_s": NaN}}', "NaN")}
    shape, duplicate = SHAPES[command]
    return {
        "alias bomb": ((_laughs() + shape.replace("{bomb}", "*i")).encode(), "aliases"),
        "merge-key alias": ((_laughs(2) + shape.replace("{bomb}", "[{<<: *c}]")).encode(), "aliases"),
        "oversized": (("# " + "x" * (3 * MIB) + "\n").encode(), "TIDAL_CLI_MAX_FILE_BYTES"),
        "deep nesting": (shape.replace("{bomb}", "[" * 200_000 + "]" * 200_000).encode(), "nesting"),
        "huge number": (shape.replace("{bomb}", "[" + "9" * 1_000_000 + "]").encode(), "digits"),
        "duplicate keys": (duplicate.encode(), "duplicate key"),
    }


def run_measured(args: list[str], cwd: Path = ROOT, timeout: float = 60) -> tuple[int, str, float, float]:
    """(exit code, stderr, CPU seconds, peak RSS in MiB) of `tidal ARGS`."""
    err_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"tidal-err-{os.getpid()}-{time.monotonic_ns()}"
    with open(err_path, "wb") as err:
        process = subprocess.Popen([*TIDAL, *args], stdout=subprocess.DEVNULL, stderr=err, cwd=cwd,
                                   env=os.environ.copy())
        deadline = time.monotonic() + patience(timeout)
        peak = 0.0
        while True:
            peak = max(peak, _high_water_mib(process.pid))
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                os.wait4(process.pid, 0)
                raise AssertionError(f"tidal {' '.join(args)[:200]} still running after {patience(timeout):g}s")
            time.sleep(0.01)
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = err_path.read_text(errors="replace")
    err_path.unlink()
    # ru_maxrss keeps the high-water mark of the memory the child was forked
    # with (the test worker's, often near 200 MiB late in a run); the exec'd
    # command's own VmHWM, read while it runs, is what it used itself
    rss = peak if peak else usage.ru_maxrss / 1024
    return process.returncode, stderr, usage.ru_utime + usage.ru_stime, rss


def _high_water_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> float:
    """CPU seconds `tidal` needs to start, read a one-line tenant file and
    refuse it: what a bomb may cost on top is within a second, or within
    what starting costs on a machine where that is more (the yardstick is
    this machine's, so a slower one allows as much more). The file is read
    and validated, so the yardstick imports what refusing a bomb imports
    (the CLI loads a command's libraries only when it runs one). The median
    of three: one run on a busy machine is a poor yardstick either way."""
    path = tmp_path_factory.mktemp("baseline") / "t.yaml"
    path.write_text("tenant: t\nqouta: {cpu: 1000}\n")
    runs = [run_measured(["tenants", "apply", str(path), *NO_BUS]) for _ in range(3)]
    assert all(code == 2 for code, *_ in runs), runs
    return sorted(cpu for _, _, cpu, _ in runs)[1]


def assert_refused(result, baseline: float, *fragments: str) -> None:
    code, stderr, cpu, rss = result
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert cpu - baseline < max(1.0, baseline), f"{cpu:.2f}s of CPU (start-up {baseline:.2f}s): {lines[0]}"
    assert rss < 200, f"{rss:.0f} MiB: {lines[0]}"


def _cases(command: list[str], kind: str, suffix: str):
    return [pytest.param(command, data, suffix, fragment, id=f"{' '.join(command[:2])}{suffix}-{name}")
            for name, (data, fragment) in _bombs(command[0], kind).items()]


FILE_COMMANDS = (
    _cases(["tenants", "apply"], "yaml", ".yaml")
    + _cases(["events", "publish"], "yaml", ".yaml")
    + _cases(["events", "publish"], "json", ".json")
    + _cases(["simulate", "--scenario"], "yaml", ".yaml")
)


@pytest.mark.parametrize("command, data, suffix, fragment", FILE_COMMANDS)
def test_every_file_bomb_is_exit_2_in_a_second_and_under_200_mib(tmp_path, baseline, command, data, suffix,
                                                                 fragment):
    path = tmp_path / f"bomb{suffix}"
    path.write_bytes(data)
    extra = NO_BUS if command[0] in ("tenants", "events") else ["--data-dir", str(tmp_path / "sim")]
    assert_refused(run_measured([*command, str(path), *extra], timeout=30), baseline, str(path), fragment)


CSV_BOMBS = {
    "oversized": b"t,usage\n" + b"0,1\n" * (MIB),
    "one endless line": b"t,usage\n" + b"1" * (3 * MIB),
}


@pytest.mark.parametrize("name", sorted(CSV_BOMBS))
@pytest.mark.parametrize("command", [
    ["fairshare", "trace", "--adjust-time", "1d", "--period", "1h", "--usage"],
    ["simulate", "--nodes", "{other}", "--pods"],
    ["simulate", "--pods", "{other}", "--nodes"],
    ["cpus", "pick", "--available", "0-3", "--count", "1", "--topology"],
    ["nats-config", "--cluster", "c", "--out", "{dir}/n.conf", "--nodes-file"],
], ids=["fairshare", "simulate-pods", "simulate-nodes", "cpus-pick", "nats-config"])
def test_every_other_input_file_is_bounded_before_it_is_read(tmp_path, baseline, command, name):
    path = tmp_path / "bomb.csv"
    path.write_bytes(CSV_BOMBS[name])
    (tmp_path / "other.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\n")
    args = [a.replace("{other}", str(tmp_path / "other.csv")).replace("{dir}", str(tmp_path)) for a in command]
    assert_refused(run_measured([*args, str(path)]), baseline, str(path), "TIDAL_CLI_MAX_FILE_BYTES")


def test_the_limit_is_a_setting_named_in_the_error(tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.yaml"
    path.write_text("tenant: t\n" + "# padding\n" * 200)
    monkeypatch.setenv("TIDAL_CLI_MAX_FILE_BYTES", "1000")
    assert main(["tenants", "apply", str(path), *NO_BUS]) == 2
    assert "over the 1000-byte limit for input files (TIDAL_CLI_MAX_FILE_BYTES)" in capsys.readouterr().err
    monkeypatch.setenv("TIDAL_CLI_MAX_FILE_BYTES", "nan")
    assert main(["tenants", "apply", str(path), *NO_BUS]) == 2
    assert "TIDAL_CLI_MAX_FILE_BYTES" in capsys.readouterr().err


def test_a_quadratic_tenant_file_is_refused_in_a_second(tmp_path, baseline):
    """15,000 groups with a repeat: list.count made that 10**8 comparisons."""
    groups = [{"name": f"g{i}", "bindings": [{"node": "n", "gpus": ["0"]}]} for i in range(15_000)]
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps({"tenant": "t", "groups": [*groups, groups[0]]}))
    assert_refused(run_measured(["tenants", "apply", str(path), *NO_BUS]), baseline, "repeated: g0")


# -- typos do not pass silently ---------------------------------------------------------------------------

@pytest.mark.parametrize("document, fragment", [
    ("tenant: t\nqouta: {cpu: 1000}\n", "field 'qouta'"),
    ("tenant: t\npermissions: {node: [a]}\n", "field 'permissions.node'"),
    ("tenant: t\ngroups: [{name: g, bindings: [{node: n, gpus: ['0']}], container: c}]\n", "field 'groups.0.container'"),
    ("tenant: t\nquota: {cpu: 1}\nquota: {}\n", "duplicate key 'quota'"),
])
def test_tenant_file_typos_are_refused(tmp_path, capsys, document, fragment):
    path = tmp_path / "t.yaml"
    path.write_text(document)
    assert main(["tenants", "apply", str(path), *NO_BUS]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


@pytest.mark.parametrize("event, fragment", [
    ({"type": "node.metrics", "payload": {"node": "n", "sampled_at": "2026-01-01T00:00:00Z", "interval_s": 10,
                                          "cpu_used_mili": 5}}, "field 'payload.cpu_used_mili'"),
    ({"type": "node.metrics", "clutser": "x", "payload": {}}, "field 'clutser'"),
    ({"id": "e", "type": "node.metrics", "version": "99", "cluster": "c", "key": "n", "time": "2026-01-01T00:00:00Z",
      "source": "s", "payload": {"node": "n", "sampled_at": "2026-01-01T00:00:00Z", "interval_s": 10}},
     "field 'version'"),
    ({"id": "e", "type": "node.metrics", "version": True, "cluster": "c", "key": "n", "time": "2026-01-01T00:00:00Z",
      "source": "s", "payload": {"node": "n", "sampled_at": "2026-01-01T00:00:00Z", "interval_s": 10}},
     "field 'version'"),
    ({"id": "e", "type": "node.metrics", "version": 1, "cluster": "c", "key": "n", "time": "2026-01-01T00:00:00Z",
      "source": "s", "payload": {"node": "m", "sampled_at": "2026-01-01T00:00:00Z", "interval_s": 10}},
     "identity: envelope key 'n' but the payload is about 'm'"),
])
def test_event_file_typos_and_forged_keys_are_refused(tmp_path, capsys, event, fragment):
    path = tmp_path / "e.json"
    path.write_text(json.dumps(event))
    assert main(["events", "publish", str(path), *NO_BUS]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def test_wire_events_keep_tolerating_unknown_fields():
    from tidal_schemas import decode

    event = {"id": "e", "type": "node.metrics", "version": 1, "cluster": "c", "key": "n",
             "time": "2026-01-01T00:00:00Z", "source": "s", "a_newer_field": 1,
             "payload": {"node": "n", "sampled_at": "2026-01-01T00:00:00Z", "interval_s": 10, "new": 2}}
    assert decode(json.dumps(event)).payload.node == "n"


# -- every bad option is one line naming it, exit 2 -----------------------------------------------------------

def _numeric_options() -> list[tuple[list[str], str]]:
    """(subcommand path, option) for every option parsed as a number."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif getattr(action.type, "__name__", "") in ("number", "float", "int", "_positive_duration"):
                found.append((path, action.option_strings[0]))

    walk(build_parser(), [])
    return found


NUMERIC = _numeric_options()
REQUIRED = {"replay": ["--from", "earliest"], "fairshare": ["--adjust-time", "1d", "--period", "1h", "--usage", "u"],
            "events": ["n"], "simulate": ["--synthetic"]}


def test_no_option_takes_a_bare_float_or_int():
    """float('nan') and int('99999999') pass argparse: each number has a range."""
    bare = [(path, option) for path, option in NUMERIC
            if option not in ("--initial-score",)  # fairshare's own parser: checked in its run()
            and getattr(_action(path, option).type, "__name__", "") in ("float", "int")]
    assert bare == []
    assert len(NUMERIC) >= 20


def _action(path: list[str], option: str) -> argparse.Action:
    parser = build_parser()
    for name in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return next(a for a in parser._actions if option in a.option_strings)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "²"])
@pytest.mark.parametrize("path, option", NUMERIC, ids=[f"{' '.join(p)} {o}" for p, o in NUMERIC])
def test_every_numeric_option_refuses_non_finite_values(capsys, path, option, value):
    argv = [*path, *REQUIRED.get(path[0], []), f"{option}={value}"]
    if path[0] == "events" and path[1] == "tail":
        argv = ["events", "tail", "node.metrics", f"{option}={value}"]
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv, fragment", [
    (["replay", "--from", "²", *NO_BUS], "--from"),
    (["replay", "--from", "-99999999d", *NO_BUS], "--from"),
    (["replay", "--from", "earliest", "--namespace", "A.B"], "--namespace"),
    (["events", "tail", "node.metrics", "--from", "²", "--no-follow", *NO_BUS], "--from"),
    (["up", "--nats-port", "99999"], "--nats-port"),
    (["up", "--data-dir", "/proc/x/y", "--services", ""], "--data-dir"),
    (["up", "--cluster", "a.b"], "--cluster"),
    (["nats-config", "--cluster", "c", "--nodes", "a", "--out", "/proc/x/nats.conf"], "--out"),
    (["nats-config", "--cluster", "c", "--nodes", "a", "--out", "{tmp}/n.conf", "--credentials-dir", "/proc/x"],
     "--credentials-dir"),
    (["simulate", "--synthetic", "--report", "/proc/x/r.json"], "--report"),
    (["schemas", "export", "--dir", "/proc/x"], "--dir"),
])
def test_bad_input_is_one_line_naming_the_argument(tmp_path, capsys, argv, fragment):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "internal error" not in err, err


def test_fairshare_trace_with_times_at_the_float_limits_is_bad_input(tmp_path, capsys):
    usage = tmp_path / "u.csv"
    usage.write_text("t,usage\n-1e308,1\n1e308,2\n")
    assert main(["fairshare", "trace", "--adjust-time", "1d", "--period", "1h", "--usage", str(usage)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--period" in err


def test_from_minus_two_hours_works_as_the_readme_writes_it(capsys):
    """`tidal replay … --from -2h`: argparse took -2h for an option."""
    readme = (ROOT / "README.md").read_text()
    assert "--from -2h" in readme
    assert main(["replay", "--from", "-2h", *NO_BUS]) == 1  # parsed: it fails only on the missing broker
    err = capsys.readouterr().err
    assert "cannot connect to NATS" in err and "expected one argument" not in err
    assert main(["events", "tail", "node.metrics", "--from", "-30m", "--no-follow", *NO_BUS]) == 1
    assert "cannot connect" in capsys.readouterr().err


@pytest.mark.parametrize("breaker", ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\n"])
def test_a_message_quoting_a_line_break_stays_one_line(breaker):
    from tidal_cli.errors import one_line

    message = one_line(f"scenario.yaml: pods.0.name: {breaker!s}x{breaker}y is not a name")
    assert len(message.splitlines()) == 1 and "x" in message and "y is not a name" in message
