"""The simulator's report as people read it: the terminal summary and the
HTML page show only real values, formatted — a figure the run did not reach
says so in words, mappings are aligned `name: value` lines or HTML tables,
never `None` or a Python dict repr — while the report's JSON keeps its nulls
and field names (replay and compare read them)."""

from __future__ import annotations

from html import unescape
from types import SimpleNamespace

import pytest
from tidal_simulator.html_report import render_html
from tidal_simulator.recorder import ArrivalLine, Recorder, TickSample
from tidal_simulator.report import build_report
from tidal_simulator.report_text import NOT_REACHED, SKIPPED, figure, mapping_lines, node_agents_line, summary

GPUS = 8  # capacity 8,000 milli-GPU: 1 % arrived = 80 milli


def sim_pod(key: str, phase: str, gpu_milli: int = 0):
    """A pod of the simulator's model, as build_report reads it."""
    gpu = SimpleNamespace(count=1 if gpu_milli else 0, total_milli=gpu_milli)
    request = SimpleNamespace(tenant="team-a", gpu=gpu, requests=SimpleNamespace(cpu_milli=1000, memory_mib=512))
    return SimpleNamespace(key=key, phase=phase, request=request)


def run_report(arrived_pct: list[int], *, ticks: bool = True, timed: bool = True, agents_found: int = 0) -> dict:
    """A report as `tidal_simulator.run` builds it, for arrivals at the given
    arrived levels (% of GPU capacity; each one placed, half its GPU allocated),
    one pod pending behind a higher-priority GPU pod and one for CPU."""
    record = Recorder()
    for i, pct in enumerate(arrived_pct):
        record.arrivals.append(ArrivalLine(f"ns/p{i}", pct * 80, pct * 40, 8000 - pct * 40, 100.0, True))
        if timed:
            record.latencies_s[f"ns/p{i}"] = 0.004 + i / 1000
    record.decisions = len(arrived_pct) + 2
    record.last_decision["ns/wait"] = ("pending", "waiting behind a higher-priority gpu pod: ns/big", {})
    record.last_decision["ns/cpu"] = ("pending", "0/2 nodes are available", {"cpu": 2})
    record.actions[("oversell", "taint")] = 1
    record.actions[("remediation", "freeze")] = 2
    if ticks:
        record.ticks.append(TickSample(10.0, {"n1": {0: 0.4, 1: 0.9}}, 1500, 3000, {"team-a": {"cpu": 3000.0}}))
    pods = [sim_pod(f"ns/p{i}", "running", 1000) for i in range(len(arrived_pct))]
    pods += [sim_pod("ns/wait", "pending", 4000), sim_pod("ns/cpu", "pending")]
    workload = SimpleNamespace(name="demo", source={"scenario": "x.yaml"}, nodes=(1, 2), pods=tuple(pods),
                               gpu_capacity_milli=lambda: GPUS * 1000, cpu_capacity_milli=lambda: 16000)
    model = SimpleNamespace(pods={p.key: p for p in pods})
    report = build_report(workload, record, model, wall_s=12.3, release_wall_s=10.0 if timed else 0.0)
    report["invariants"] = {"violations": 0, "lines": []}
    report["node_agents"] = {"audit_violations": {"double-booked": agents_found, "leaked": 0, "orphaned": 0,
                                                  "drifted": 0},
                             "cgroup_writes": {"cpuset": 14, "freeze": 2}}
    return report, record


def rendered(report: dict, record: Recorder) -> tuple[str, str]:
    """The terminal summary and the HTML page (entities decoded, so a repr
    escaped as `{&#x27;` is caught as `{'`)."""
    return summary(report, 12.3), unescape(render_html(report, record, [], {}))


def assert_only_real_values(*texts: str) -> None:
    for text in texts:
        assert "None" not in text, text
        assert "{'" not in text and "{\"" not in text.split("<h2>Report (JSON)</h2>")[0], text
        assert "nan" not in text.split(), text


def test_a_run_past_100_percent_that_skipped_the_level_says_so_and_130_is_not_reached():
    # arrivals at 50 … 95 % then 110 %: no arrival within ±1 of 100 (report.py's averaging)
    report, record = run_report([50, 60, 70, 80, 90, 95, 110])
    alloc = report["gpu"]["allocation_pct_by_arrived"]
    assert alloc["100"] is None and alloc["130"] is None and alloc["90"] == 45.0  # the JSON keeps its nulls
    text, page = rendered(report, record)
    assert_only_real_values(text, page)
    assert (f"GPU allocation at arrived 90 % / 100 % / 110 % / 130 %: 45 % / {SKIPPED} / 55 % / {NOT_REACHED}"
            in text), text
    assert f"<td>GPU allocation at 100 % arrived</td><td>{SKIPPED}</td>" in page


def test_a_run_that_never_got_to_100_percent_says_not_reached_on_both():
    report, record = run_report([50, 55, 60], ticks=False, timed=False)
    text, page = rendered(report, record)
    assert_only_real_values(text, page)
    assert f"<td>GPU allocation at 100 % arrived</td><td>{NOT_REACHED}</td>" in page
    assert f"45 % / {NOT_REACHED} / {NOT_REACHED} / {NOT_REACHED}" not in text  # 90 is not reached either
    assert f": {NOT_REACHED} / {NOT_REACHED} / {NOT_REACHED} / {NOT_REACHED};" in text
    # nothing timed, no tick: the figures say what is missing
    assert "latency p50 none timed p99 none timed" in text and "CPU utilisation mean not measured" in text
    assert "<td>decision latency p50 / p99</td><td>none timed / none timed</td>" in page
    assert "<td>decisions / s</td><td>none</td>" in page


def test_mappings_are_aligned_lines_in_the_terminal_and_tables_in_the_page():
    report, record = run_report([50, 100, 130], agents_found=2)
    text, page = rendered(report, record)
    assert_only_real_values(text, page)
    lines = text.splitlines()
    at = lines.index("pending pods by reason:")
    # reason_class: the filter that removed the most nodes, else the reason up to its colon;
    # the report's order (most pods first), values aligned after the longest name
    assert lines[at + 1:at + 3] == ["  waiting behind a higher-priority gpu pod: 1",
                                    "  cpu:                                      1"], lines
    assert "actions: oversell: taint 1; remediation: freeze 2" in text
    assert "node agents: audit violations 2 (double-booked 2), cgroup writes cpuset 14, freeze 2" in text
    assert "<tr><td>double-booked</td><td>2</td></tr>" in page and "<tr><td>cpuset</td><td>14</td></tr>" in page
    assert "<tr><td>waiting behind a higher-priority gpu pod</td><td>1</td></tr>" in page
    assert "<td>GPU allocation at 100 % arrived</td><td>50 %</td>" in page
    # Jain's satisfaction index has no value when no demand is known for the type: said in words
    assert "<td>no demand known</td>" in page or all(v["jain_satisfaction"] is not None
                                                     for v in report["fairness"].values())


def test_the_demo_prints_the_node_agents_line_without_a_repr():
    agents = {"audit_violations": {"double-booked": 0, "leaked": 3}, "cgroup_writes": {}}
    assert node_agents_line(agents) == "node agents: audit violations 3 (leaked 3), cgroup writes none"
    clean = {"audit_violations": {"double-booked": 0}, "cgroup_writes": {"cpuset": 20, "freeze": 1}}
    assert node_agents_line(clean) == "node agents: audit violations 0, cgroup writes cpuset 20, freeze 1"


@pytest.mark.parametrize(("value", "unit", "missing", "expected"), [
    (None, " %", "not reached", "not reached"),
    (float("nan"), "", "not reached", "not reached"),
    (None, " ms", "none timed", "none timed"),
    (95.75, " %", "-", "95.75 %"),
    (95.7, " %", "-", "95.7 %"),        # no trailing zero
    (95.0, " %", "-", "95 %"),          # a whole float is written whole
    (0.004999, " ms", "-", "0 ms"),     # two decimals at most
    (12, "", "-", "12"),
    (True, "", "-", "yes"),
    ("demo", "", "-", "demo"),
])
def test_figure(value, unit, missing, expected):
    assert figure(value, unit, missing) == expected


def test_mapping_lines_nest_and_say_none_for_an_empty_mapping():
    assert mapping_lines({"a": 1, "bbb": None, "c": {}}) == ["  a:   1", "  bbb: not reached", "  c:", "    none"]
    assert mapping_lines({}) == []


def test_the_demos_stream_table_keeps_its_columns_when_a_stream_has_many_publishers(capsys):
    from collections import Counter

    from tidal_cli.demo_cmd import _print_summary

    sources = {"stage.journal": {"placement", "oversell", "remediation"}, "pod.lifecycle": {"bridge"}}
    _print_summary(Counter({"stage.journal": 40, "pod.lifecycle": 39}), 0, sources,
                   {"stage.journal", "pod.lifecycle", "node.metrics"}, ["bridge"], 1.0)
    out = capsys.readouterr().out
    assert_only_real_values(out)
    marked = [line for line in out.splitlines() if line.endswith("expected")]
    assert len(marked) == 3 and len({line.index("expected") for line in marked}) == 1, out  # one column
    assert "stage.journal            40  oversell, placement, remediation expected" in out
    assert "node.metrics              0  -" in out  # no events, no publisher: a dash, not None
