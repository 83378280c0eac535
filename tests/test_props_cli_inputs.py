"""Property tests of every file the `tidal` command and the node agent read:
tenant YAML (`tidal tenants apply`), event files (`tidal events publish`),
scenario YAML and openb trace CSVs (`tidal simulate`), the topology JSON of
`tidal cpus pick`, the GPU inventory file and the NUMA override.

Whatever the file holds, the command either accepts it or exits 2 with one
line on stderr (no traceback); the readers raise their own clear error. The
commands run in this process through `tidal_cli.main.main`, with the part
after validation (the bus, the simulation) replaced by a marker, so a valid
input is recognised without a broker."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import ROOT, patience
from test_props_schemas import SAMPLES, huge_literals, json_values, paths, replaced, wire
from tidal_cli import events_cmd, main as cli_main, simulate_cmd, tenants_cmd
from tidal_cli.errors import CliError
from tidal_schemas import decode, encode, make_envelope
from tidal_simulator.openb import TraceError, read_nodes, read_pods
from tidal_simulator.scenario import ScenarioError, load_scenario
from tidal_simulator.trace import trace_workload
from tidal_topology.cli_cpus import BadInput, load_topology
from tidal_topology.cpuset import MAX_CPU_ID, parse_cpuset
from tidal_topology.gpus import read_inventory_file
from tidal_topology.settings import TopologySettings

PROPS = settings(max_examples=60, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ACCEPTED = 3  # exit code of the marker that stands in for publishing / simulating


@pytest.fixture(autouse=True)
def no_bus_no_simulation(monkeypatch):
    """Past validation, commands would connect or simulate: stop them there."""
    def accepted(*args, **kwargs):
        raise CliError("input accepted", exit_code=ACCEPTED)

    monkeypatch.setattr(tenants_cmd, "bus_for", accepted)
    monkeypatch.setattr(events_cmd, "bus_for", accepted)
    monkeypatch.setattr(simulate_cmd, "_run_embedded", accepted)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inputs")


def tidal(*argv: str) -> tuple[int, str]:
    """Run `tidal argv...` in this process: (exit code, stderr)."""
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = cli_main.main(list(argv))
    return code, err.getvalue()


def accepted_or_one_line(code: int, err: str) -> bool:
    """True when the input was accepted; otherwise it must be exit 2 and one line."""
    if code == ACCEPTED:
        return True
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tidal"), err
    assert len(lines[0]) < 1200, len(lines[0])
    return False


def write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
    return path


def as_yaml(document) -> str:
    return yaml.safe_dump(document, allow_unicode=True, sort_keys=False)


# Hostile documents every YAML/JSON reader gets.
NASTY = [
    b"", b"\x00\x01\x02", b"\xff\xfe\xfa", "- [" * 3000 + "]" * 3000, "{a: " * 3000 + "1" + "}" * 3000,
    b"[" * 5000 + b"]" * 5000,
    # a billion laughs: aliases that expand to 10**9 strings if anything walks them as a tree
    "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
    "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]\ni: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]\n",
    "!!python/object/apply:os.system ['echo pwned']", "key: !!binary '////'", "? [a, b]\n: c\n",
    "x: 1\nx: 2\n", "\ud800: 1", "- \"\\ud800\"", "123", "~", "[]", "{}", "- null", "a: 1e999999",
    "a: " + "9" * 5000,
]
documents = st.one_of(st.sampled_from(NASTY), st.binary(max_size=300), st.text(max_size=300),
                      json_values.map(as_yaml), json_values.map(lambda v: orjson.dumps(v).decode()))


# -- tenants apply ---------------------------------------------------------------------

TENANTS = yaml.safe_load((ROOT / "examples/tenants.yaml").read_text())


def fuzzed(document, data, value_strategy=json_values):
    """`document` with one value (anywhere) replaced by something drawn."""
    path = data.draw(st.sampled_from(paths(document)))
    return replaced(document, path, data.draw(value_strategy))


@st.composite
def fuzzed_json(draw, document):
    """`document` as JSON text, with one value replaced by any JSON value."""
    path = draw(st.sampled_from(paths(document)))
    return orjson.dumps(replaced(document, path, draw(json_values))).decode()


values_of_every_kind = st.one_of(json_values, huge_literals.map(lambda s: yaml.safe_load(s) if s[0] != "9" else
                                                                int(s[:4000])),
                                 st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\n\r\x00"),
                                         max_size=40))


def test_the_example_tenants_are_accepted(workdir):
    assert tidal("tenants", "apply", str(ROOT / "examples/tenants.yaml")) == (ACCEPTED, "tidal: input accepted\n")


@PROPS
@given(documents, st.sampled_from([".yaml", ".json", ".yml", ""]))
def test_tenant_files_of_anything(workdir, content, suffix):
    path = write(workdir / f"tenants{suffix}", content)
    accepted_or_one_line(*tidal("tenants", "apply", str(path)))


@PROPS
@given(st.data())
def test_tenant_files_with_one_value_changed(workdir, data):
    path = write(workdir / "tenants.yaml", as_yaml(fuzzed(TENANTS, data, values_of_every_kind)))
    code, err = tidal("tenants", "apply", str(path))
    if not accepted_or_one_line(code, err):
        assert str(path) in err


def test_a_tenant_too_large_to_publish_is_refused_before_publishing(workdir):
    huge = [{"tenant": "t", "permissions": {"nodes": [f"node-{i:07d}-" + "x" * 200 for i in range(6000)]}}]
    path = write(workdir / "huge.yaml", as_yaml(huge))
    code, err = tidal("tenants", "apply", str(path))
    assert not accepted_or_one_line(code, err) and "bytes" in err and "limit" in err


# -- events publish --------------------------------------------------------------------

def short_form(event_type: str) -> dict:
    return {"type": event_type, "payload": wire(event_type)["payload"]}


@PROPS
@given(documents, st.sampled_from([".yaml", ".json"]))
def test_event_files_of_anything(workdir, content, suffix):
    path = write(workdir / f"events{suffix}", content)
    accepted_or_one_line(*tidal("events", "publish", str(path)))


@PROPS
@given(st.sampled_from(sorted(SAMPLES)), st.booleans(), st.sampled_from([".yaml", ".json"]), st.data())
def test_event_files_with_one_value_changed(workdir, event_type, full, suffix, data):
    document = fuzzed(wire(event_type) if full else short_form(event_type), data, values_of_every_kind)
    try:
        text = orjson.dumps(document).decode() if suffix == ".json" else as_yaml(document)
    except (TypeError, orjson.JSONEncodeError):  # a value JSON cannot hold: write it as YAML
        text, suffix = as_yaml(document), ".yaml"
    path = write(workdir / f"events{suffix}", text)
    code, err = tidal("events", "publish", str(path))
    if not accepted_or_one_line(code, err):
        assert str(path) in err


# -- simulate --scenario ---------------------------------------------------------------

SCENARIO = {
    "name": "small", "seed": 1, "tick_s": 10, "duration_s": 120,
    "nodes": [{"name": "n", "count": 2, "numa_cpus": [4, 4], "memory_mib": 8192, "gpus": 2, "reserved_cpus": [0],
               "background": {0: 0.1}}],
    "tenants": [{"tenant": "team", "quota": {"cpu": 8000}}],
    "pods": [{"name": "web", "replicas": 2, "tenant": "team", "cpu_milli": 1000, "qos": "LS", "every_s": 5,
              "usage": {"cpu": {"kind": "diurnal", "level": 0.5, "amplitude": 0.2}}},
             {"name": "batch", "tenant": "team", "cpu_milli": 2000, "node": "n-0", "numa": [1], "evictable": True,
              "gpu": {"count": 1, "milli": 500}, "usage": {"cpu": {"kind": "spike", "peak": 0.9, "start_s": 30}}}],
    "expect": [{"kind": "placed", "pod": "web-0"}, {"kind": "actions", "action": "freeze", "max": 3}],
}


def test_the_small_scenario_and_the_demo_are_accepted(workdir):
    path = write(workdir / "scenario.yaml", as_yaml(SCENARIO))
    assert tidal("simulate", "--scenario", str(path))[0] == ACCEPTED
    assert tidal("simulate", "--scenario", str(ROOT / "examples/demo/scenario.yaml"))[0] == ACCEPTED


@PROPS
@given(documents)
def test_scenario_files_of_anything(workdir, content):
    path = write(workdir / "scenario.yaml", content)
    accepted_or_one_line(*tidal("simulate", "--scenario", str(path)))


@PROPS
@given(st.data())
def test_scenario_files_with_one_value_changed(workdir, data):
    document = fuzzed(SCENARIO, data, values_of_every_kind)
    path = write(workdir / "scenario.yaml", as_yaml(document))
    code, err = tidal("simulate", "--scenario", str(path))
    if not accepted_or_one_line(code, err):
        assert str(path) in err


@pytest.mark.parametrize("change, fragment", [
    ({"nodes": [{"name": "n", "count": 10**12}]}, "nodes.0.count"),
    ({"nodes": [{"name": "n", "numa_cpus": [10**9]}]}, "numa_cpus"),
    ({"nodes": [{"name": "n", "numa_cpus": [1] * 1000}]}, "nodes.0.numa_cpus"),
    ({"pods": [{"name": "p", "replicas": 10**12}]}, "pods.0.replicas"),
    ({"nodes": [{"name": f"n{i}", "count": 5000} for i in range(100)]}, "nodes"),  # distinct: no YAML aliases
    ({"pods": [{"name": f"p{i}", "replicas": 100_000} for i in range(100)]}, "pods"),
    ({"duration_s": float("inf")}, "duration_s"),
    ({"tick_s": 1e-300}, "tick_s"),
    ({"pods": [{"name": "p", "arrive_s": float("nan")}]}, "pods.0.arrive_s"),
    ({"nodes": [{"name": "n", "gpus": 10**15}]}, "nodes.0.gpus"),
])
def test_scenarios_too_big_to_run_are_refused_at_once(workdir, change, fragment):
    path = write(workdir / "big.yaml", as_yaml({**SCENARIO, **change}))
    code, err = tidal("simulate", "--scenario", str(path))
    assert not accepted_or_one_line(code, err) and fragment in err
    with pytest.raises(ScenarioError):
        load_scenario(path)


# -- simulate --nodes --pods (openb traces) ---------------------------------------------

NODE_HEADER = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
POD_HEADER = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
              "creation_time", "deletion_time", "scheduled_time"]
NODES = [["node-0", "32000", "131072", "2", "T4"], ["node-1", "64000", "262144", "8", "V100M16"]]
PODS = [["pod-0", "4000", "8192", "1", "1000", "", "LS", "Running", "0", "1200", "0"],
        ["pod-1", "2000", "4096", "1", "500", "T4|V100M16", "BE", "Running", "10", "900", "10"],
        ["pod-2", "8000", "16384", "2", "1000", "", "Burstable", "Failed", "20", "", ""],
        ["pod-3", "1000", "1024", "0", "0", "", "BE", "Pending", "30.5", "40", "35"]]


def as_csv(header: list[str], rows: list[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


cells = st.one_of(
    st.text(max_size=12), st.sampled_from(["", "-1", "0", "1e400", "inf", "nan", "1.5", "1e3", "٣", " 7 ", "0x10",
                                           "9" * 30, "99999999999999999999", "-0", "+3", "1_000"]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str), st.floats().map(str))


@st.composite
def trace_files(draw):
    """(nodes.csv, pods.csv) texts: the sample with a cell, a row or the header broken."""
    nodes, pods = [list(r) for r in NODES], [list(r) for r in PODS]
    node_header, pod_header = list(NODE_HEADER), list(POD_HEADER)
    table, header = draw(st.sampled_from([(nodes, node_header), (pods, pod_header)]))
    how = draw(st.sampled_from(["cell", "cell", "cell", "row", "header", "short", "long", "duplicate"]))
    row = draw(st.integers(min_value=0, max_value=len(table) - 1))
    column = draw(st.integers(min_value=0, max_value=len(header) - 1))
    if how == "cell":
        table[row][column] = draw(cells)
    elif how == "row":
        table[row] = draw(st.lists(cells, max_size=12))
    elif how == "header":
        header[column] = draw(st.text(max_size=8))
    elif how == "short":
        del table[row][column:]
    elif how == "long":
        table[row] += draw(st.lists(cells, min_size=1, max_size=3))
    else:
        table.append(list(table[row]))
    return as_csv(node_header, nodes), as_csv(pod_header, pods)


def test_the_sample_trace_is_accepted(workdir):
    nodes = write(workdir / "nodes.csv", as_csv(NODE_HEADER, NODES))
    pods = write(workdir / "pods.csv", as_csv(POD_HEADER, PODS))
    for extra in ([], ["--arrive-only"]):
        assert tidal("simulate", "--nodes", str(nodes), "--pods", str(pods), *extra)[0] == ACCEPTED


@PROPS
@given(trace_files(), st.booleans())
def test_trace_files_with_one_thing_broken(workdir, files, arrive_only):
    nodes = write(workdir / "nodes.csv", files[0])
    pods = write(workdir / "pods.csv", files[1])
    code, err = tidal("simulate", "--nodes", str(nodes), "--pods", str(pods), *(["--arrive-only"] * arrive_only))
    if not accepted_or_one_line(code, err):
        assert "nodes.csv" in err or "pods.csv" in err
    try:  # the readers themselves: a clear TraceError or rows within the documented bounds
        read = read_nodes(nodes), read_pods(pods)
    except TraceError as exc:
        assert "\n" not in str(exc) and ".csv" in str(exc)
        return
    assert all(n.gpus >= 0 and n.cpu_milli >= 0 for n in read[0])
    assert all(0 <= p.gpu_milli <= 1000 and p.num_gpu >= 0 for p in read[1])


@PROPS
@given(st.one_of(st.binary(max_size=400), st.text(max_size=400)), st.booleans())
def test_trace_files_of_anything(workdir, content, broken_nodes):
    good_nodes, good_pods = as_csv(NODE_HEADER, NODES), as_csv(POD_HEADER, PODS)
    nodes = write(workdir / "nodes.csv", content if broken_nodes else good_nodes)
    pods = write(workdir / "pods.csv", good_pods if broken_nodes else content)
    accepted_or_one_line(*tidal("simulate", "--nodes", str(nodes), "--pods", str(pods)))


@pytest.mark.parametrize("nodes, pods, fragment", [
    ("sn,cpu_milli,memory_mib,gpu,model\nn," + "x" * 200_000 + ",1,1,T4\n", None, "nodes.csv"),   # csv field limit
    ("sn,cpu_milli,memory_mib,gpu,model\nn,1\x00,1,1,T4\n", None, "nodes.csv"),
    ("sn,cpu_milli,memory_mib,gpu,model\nn,1000,1024,1000000000,T4\n", None, "gpu"),
    (None, as_csv(POD_HEADER, [["p", "1", "1", "2", "500", "", "", "", "", "", ""]]), "gpu_milli"),
    (None, as_csv(POD_HEADER, [["p", "1", "1", "0", "5", "", "", "", "", "", ""]]), "gpu_milli"),
    (None, as_csv(POD_HEADER, [["p", "1", "1", "1", "500", "", "", "", "1e999", "", ""]]), "creation_time"),
    (None, as_csv(POD_HEADER, [["", "1", "1", "1", "500", "", "", "", "", "", ""]]), "name"),
    (None, as_csv(POD_HEADER[:5], [["p", "1", "1", "1", "500"], ["p", "1", "1", "1", "500"]]), "repeats"),
])
def test_trace_files_known_to_be_nasty(workdir, nodes, pods, fragment):
    nodes_path = write(workdir / "nodes.csv", nodes or as_csv(NODE_HEADER, NODES))
    pods_path = write(workdir / "pods.csv", pods or as_csv(POD_HEADER, PODS))
    code, err = tidal("simulate", "--nodes", str(nodes_path), "--pods", str(pods_path), "--arrive-only")
    assert not accepted_or_one_line(code, err) and fragment in err
    with pytest.raises(TraceError):
        trace_workload(nodes_path, pods_path)


# -- the node agent's files: topology JSON (cpus pick), GPU inventory, NUMA override, cpusets ---

TOPOLOGY = [{"cpu": c, "core": c // 2, "socket": c // 4, "numa": c // 4} for c in range(8)]


@PROPS
@given(st.one_of(documents, fuzzed_json(TOPOLOGY)))
def test_cpus_pick_topology_files(workdir, content):
    path = write(workdir / "topology.json", content)
    code, err = tidal("cpus", "pick", "--topology", str(path), "--available", "0-3", "--count", "2")
    assert code in (0, 1, 2), err
    assert "Traceback" not in err and len(err.splitlines()) <= 1, err
    try:
        load_topology(path)
    except BadInput as exc:
        assert "\n" not in str(exc)


def test_a_large_topology_file_is_read_in_linear_time(workdir):
    path = write(workdir / "many.json", json.dumps([{"cpu": c, "core": c, "socket": 0, "numa": 0}
                                                    for c in range(60_000)]))
    assert len(load_topology(path)) == 60_000


@PROPS
@given(st.one_of(st.text(max_size=40), st.sampled_from(["0-99999999999", "0-4294967295", "5-1", "1,,2", "٣", "²",
                                                        "0-3,8", " 1 - 2 ", str(MAX_CPU_ID), f"0-{MAX_CPU_ID + 1}"])))
def test_cpusets_from_any_text(text):
    try:
        cpus = parse_cpuset(text)
    except ValueError as exc:
        assert "\n" not in str(exc)
        return
    assert cpus == sorted(set(cpus)) and all(0 <= c <= MAX_CPU_ID for c in cpus)


def test_cpus_pick_available_ranges_are_bounded(workdir):
    path = write(workdir / "topology.json", json.dumps(TOPOLOGY))
    code, err = tidal("cpus", "pick", "--topology", str(path), "--available", "0-99999999999", "--count", "1")
    assert code == 2 and "--available" in err and len(err.splitlines()) == 1


GPUS = [{"id": "gpu0", "model": "A100", "memory_mib": 40960, "numa": 0},
        {"id": "gpu0-mig1", "model": "A100", "kind": "virtual", "parent": "gpu0"}]


@PROPS
@given(st.one_of(documents, fuzzed_json(GPUS)))
def test_gpu_inventory_files(workdir, content):
    path = write(workdir / "gpus.json", content)
    found = read_inventory_file(path)
    if found.error:
        assert found.reason and "\n" not in found.reason and not found.gpus
    else:
        assert found.source == "file" and all(g.id for g in found.gpus)


@PROPS
@given(st.one_of(st.text(max_size=30), st.text(alphabet="0123456789:, ²٣-", max_size=30)))
@example("0:0,1:1")
@example("²:0")
@example("0:" + "9" * 5000)
def test_numa_override_settings(text):
    try:
        settings = TopologySettings(numa_override=text, node_name="n")
    except ValueError as exc:  # pydantic's ValidationError is one
        assert "numa_override" in str(exc)
        return
    mapping = settings.parse_override(settings.numa_override)
    assert all(isinstance(k, int) and isinstance(v, int) and 0 <= k <= MAX_CPU_ID for k, v in mapping.items())


SYSFS = ROOT / "tests/fixtures/sysfs/dual_socket_multi_numa_ht"
SYSFS_FILES = sorted(str(p.relative_to(SYSFS)) for p in SYSFS.rglob("*") if p.is_file())
sysfs_texts = st.one_of(st.text(max_size=30), st.binary(max_size=8),
                        st.sampled_from(["", "-1", "٣", "1_0", "9" * 30, "0-99999999999", "3-1", "0,,1",
                                         "Node 0 MemTotal: 99999999999999999999999 kB", "Node 0 MemTotal: -5 kB"]),
                        st.integers(min_value=-(2**70), max_value=2**70).map(str))


@PROPS
@given(st.sampled_from(SYSFS_FILES), sysfs_texts, st.sampled_from(["", "0", "0-3", "63"]))
@example("devices/system/node/node0/meminfo", "Node 0 MemTotal: 99999999999999999999999 kB", "")
@example("devices/system/cpu/cpu6/topology/core_id", "٣", "")
@example("devices/system/cpu/cpu6/topology/core_id", "99999999999999999999999", "")
@example("devices/system/cpu/cpu6/topology/physical_package_id", "99999999999999999999999", "")
@example("devices/system/cpu/online", "0-99999999999", "")
@example("devices/system/cpu/online", b"\xff\xfe", "")
def test_sysfs_trees_with_one_file_changed(tmp_path_factory, relative, text, reserved):
    """What the node agent reads at start: a MachineTopology and the
    NodeTopology it publishes, or SysfsError / ValueError naming the problem."""
    import shutil

    from tidal_topology.inventory import build_node_topology
    from tidal_topology.sysfs import SysfsError, read_topology

    root = tmp_path_factory.mktemp("sysfs")
    shutil.copytree(SYSFS, root, dirs_exist_ok=True)
    write(root / relative, text)
    try:
        machine = read_topology(root)
    except SysfsError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    try:
        topology = build_node_topology(machine, "n", reserved_cpus=parse_cpuset(reserved), exclusive_cpus=True)
    except ValueError as exc:  # documented: a reserved CPU the machine does not have
        assert type(exc) is ValueError and "reserved cpus" in str(exc), str(exc)
        return
    envelope = make_envelope(topology, cluster="c1", source="topology")
    assert decode(encode(envelope)) == envelope


# -- a few through a real process ---------------------------------------------------------

@pytest.mark.parametrize("argv, content", [
    (["tenants", "apply"], "- [" * 3000 + "]" * 3000),
    (["events", "publish"], b"\xff\xfe\x00garbage"),
    (["simulate", "--scenario"], as_yaml({**SCENARIO, "pods": [{"name": "p", "replicas": 10**12}]})),
    (["cpus", "pick", "--count", "1", "--available", "0", "--topology"], "[" * 100_000),
])
def test_bad_files_through_a_real_process(workdir, argv, content):
    path = write(workdir / "input.yaml", content)
    result = subprocess.run([sys.executable, "-m", "tidal_cli.main", *argv, str(path)], capture_output=True,
                            text=True, timeout=patience(60), cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
