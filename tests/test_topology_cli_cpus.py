"""`tidal cpus pick`: exit 0 with a JSON array, 1 with a reason, 2 on bad input
— always one line on stderr, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidal_topology.cli_cpus import main

# kubelet's topoDualSocketHT: socket/NUMA 0 = even cpus, core = cpu % 6
DUAL_SOCKET_HT = [{"cpu": c, "core": c % 6, "socket": c % 2, "numa": c % 2} for c in range(12)]


@pytest.fixture
def topology_file(tmp_path) -> Path:
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(DUAL_SOCKET_HT))
    return path


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


PICKS = [
    # (available, count, policy, expected) — the kubelet packed cases and the SPEC example
    ("0-11", 6, None, [0, 2, 4, 6, 8, 10]),  # a whole socket
    ("1-5,7-11", 1, None, [2]),  # kubelet: one cpu from dual socket HT, core from socket 0
    ("0-11", 8, "packed", [0, 1, 2, 4, 6, 7, 8, 10]),  # 3 cores on numa0, then 1 on numa1
    ("0-11", 4, "spread", [0, 1, 6, 7]),  # §A worked example: 2 on numa0 + 2 on numa1
    ("0-11", 3, "single-numa", [0, 2, 6]),  # a whole core then the next thread, all on numa0
]


@pytest.mark.parametrize("available, count, policy, expected", PICKS)
def test_pick_prints_a_json_array(capsys, topology_file, available, count, policy, expected):
    argv = ["--topology", str(topology_file), "--available", available, "--count", str(count)]
    if policy:
        argv += ["--policy", policy]
    code, out, err = run(capsys, argv)
    assert (code, err) == (0, "")
    assert json.loads(out) == expected
    assert out.count("\n") == 1


@pytest.mark.parametrize("policy, count, loads, expected", [
    # numa1 is the less loaded: single-numa goes there, as placement would choose
    ("single-numa", 3, "0=0.8,1=0.2", [1, 3, 7]),
    # auto (§E walk): numa1 first (0.2) gives 6, numa0 the other 1
    ("auto", 7, "0=0.8,1=0.2", [0, 1, 3, 5, 7, 9, 11]),
    # no loads: the walk ties go to the lower NUMA id
    ("auto", 2, "", [0, 6]),
])
def test_numa_load_steers_single_numa_and_auto(capsys, topology_file, policy, count, loads, expected):
    code, out, err = run(capsys, ["--topology", str(topology_file), "--available", "0-11", "--count", str(count),
                                  "--policy", policy, "--numa-load", loads])
    assert (code, err) == (0, "")
    assert json.loads(out) == expected


UNMET = [
    ("0,2,4,6", 5, "packed", "not enough cpus available: requested 5, available 4"),
    ("0-11", 7, "single-numa", "no NUMA node has 7 available cpus"),
    ("0,1,3,5", 4, "spread", "numa 0 has 1 for its share 2"),
]


@pytest.mark.parametrize("available, count, policy, reason", UNMET)
def test_unmet_request_exits_1_with_one_line_reason(capsys, topology_file, available, count, policy, reason):
    code, out, err = run(capsys, ["--topology", str(topology_file), "--available", available,
                                  "--count", str(count), "--policy", policy])
    assert code == 1 and out == ""
    assert reason in err and err.count("\n") == 1


def bad_topology(tmp_path: Path, content: str) -> str:
    path = tmp_path / "bad.json"
    path.write_text(content)
    return str(path)


BAD_INPUT = [
    # (argv builder, message fragment)
    (lambda t, tmp: ["--topology", str(tmp / "missing.json"), "--available", "0", "--count", "1"],
     "cannot read topology file"),
    (lambda t, tmp: ["--topology", bad_topology(tmp, "[{"), "--available", "0", "--count", "1"], "is not JSON"),
    (lambda t, tmp: ["--topology", bad_topology(tmp, "{}"), "--available", "0", "--count", "1"],
     "non-empty JSON array"),
    (lambda t, tmp: ["--topology", bad_topology(tmp, '[{"cpu": 0, "core": 0, "socket": 0}]'),
                     "--available", "0", "--count", "1"], "entry 0 lacks numa"),
    (lambda t, tmp: ["--topology", bad_topology(tmp, '[{"cpu": -1, "core": 0, "socket": 0, "numa": 0}]'),
                     "--available", "0", "--count", "1"], "entry 0: cpu"),
    (lambda t, tmp: ["--topology", bad_topology(tmp, '[{"cpu": "0", "core": 0, "socket": 0, "numa": 0}]'),
                     "--available", "0", "--count", "1"], "entry 0: cpu"),
    (lambda t, tmp: ["--topology", bad_topology(tmp, json.dumps([DUAL_SOCKET_HT[0]] * 2)),
                     "--available", "0", "--count", "1"], "cpu 0 more than once"),
    (lambda t, tmp: ["--topology", t, "--available", "0-", "--count", "1"], "--available: bad cpuset"),
    (lambda t, tmp: ["--topology", t, "--available", "0-13", "--count", "1"], "not in the topology: [12, 13]"),
    (lambda t, tmp: ["--topology", t, "--available", "0-3", "--count", "-2"], "--count must be >= 0"),
    (lambda t, tmp: ["--topology", t, "--available", "0-3", "--count", "two"], "invalid int value"),
    (lambda t, tmp: ["--topology", t, "--available", "0-3", "--count", "1", "--policy", "random"],
     "invalid choice: 'random'"),
    (lambda t, tmp: ["--topology", t, "--available", "0-3", "--count", "1", "--numa-load", "0=x"],
     "--numa-load: '0=x' is not ID=FRACTION"),
    (lambda t, tmp: ["--topology", t, "--available", "0-3", "--count", "1", "--numa-load", "0=nan"],
     "with a finite fraction >= 0"),
    (lambda t, tmp: ["--topology", t, "--available", "0-3", "--count", "1", "--numa-load", "7=0.5"],
     "numa 7 is not in the topology"),
    (lambda t, tmp: ["--topology", t, "--count", "1"], "the following arguments are required: --available"),
    (lambda t, tmp: ["--topology", t, "--available", "0", "--count", "1", "--extra"], "unrecognized arguments"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUT, ids=[m for _, m in BAD_INPUT])
def test_bad_input_exits_2_with_one_line(capsys, topology_file, tmp_path, argv, message):
    code, out, err = run(capsys, argv(str(topology_file), tmp_path))
    assert code == 2 and out == ""
    assert message in err
    assert err.count("\n") == 1 and err.startswith("tidal cpus pick: error:")
    assert "Traceback" not in err


def test_help_exits_0(capsys):
    code, out, _ = run(capsys, ["--help"])
    assert code == 0 and out.startswith("usage: tidal cpus pick")
