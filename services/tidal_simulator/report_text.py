"""The report in words, for the terminal and the HTML page (pure over the
report's JSON): a figure the run did not reach says so, a mapping is
aligned `name: value` lines (the HTML page makes tables of the same rows),
never a Python repr. The report's JSON keeps its nulls and field names:
replay and compare read them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

NOT_REACHED = "not reached"
# A GPU level the arrivals jumped over: the run passed it, but no arrival
# logged an allocation within ±1 % of it (report.py's averaging).
SKIPPED = "jumped past, not measured"
SUMMARY_LEVELS = ("90", "100", "110", "130")


def figure(value: Any, unit: str = "", missing: str = NOT_REACHED) -> str:
    """`value` as a reader wants it: `missing` for None or NaN, yes/no for a
    bool, a whole number without decimals, any other number with at most
    two, then the unit (with its own leading space: ` %`, ` ms`)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    if isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        text = str(int(value))
    elif isinstance(value, float):
        text = f"{value:.2f}".rstrip("0").rstrip(".")
    else:
        text = str(value)
    return text + unit


def gpu_level(gpu: Mapping[str, Any], level: str) -> str:
    """GPU allocation at an arrived level, in %: the figure, or why there is
    none — the run never got there, or went past it between two arrivals."""
    value = (gpu.get("allocation_pct_by_arrived") or {}).get(level)
    if value is not None:
        return figure(value, " %")
    final = gpu.get("arrived_pct_final")
    return SKIPPED if final is not None and final >= float(level) else NOT_REACHED


def pairs(mapping: Mapping[str, Any] | None) -> str:
    """`a 1, b 2` on one line; `none` for an empty mapping."""
    return ", ".join(f"{k} {figure(v)}" for k, v in (mapping or {}).items()) or "none"


def mapping_lines(mapping: Mapping[str, Any] | None, indent: str = "  ") -> list[str]:
    """One aligned `name: value` line per entry (nested mappings indented
    below their name); [] for an empty mapping."""
    items = list((mapping or {}).items())
    width = max((len(str(k)) for k, _ in items), default=0) + 1
    lines = []
    for key, value in items:
        if isinstance(value, Mapping):
            lines.append(f"{indent}{key}:")
            lines += mapping_lines(value, indent + "  ") or [f"{indent}  none"]
        else:
            lines.append(f"{indent}{str(key) + ':':<{width}} {figure(value)}")
    return lines


def figures(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The key figures of a run, (name, value in words), as the HTML page
    shows them first."""
    run, gpu, pods, decisions = report["run"], report["gpu"], report["pods"], report["decisions"]
    latency = decisions["latency_ms"]
    audited = report.get("invariants", {}).get("violations")
    return [("workload", str(run["workload"])), ("nodes / pods", f"{run['nodes']} / {run['pods']}"),
            ("GPU allocation at 100 % arrived", gpu_level(gpu, "100")),
            ("GPUs unallocated (end)", figure(gpu.get("unallocated_gpus_final"), missing="no GPUs")),
            ("CPU utilisation (mean)", figure(report["cpu"]["utilisation_pct_mean"], " %", "not measured")),
            ("pods running / pending", f"{pods['running']} / {pods['pending']}"),
            ("decisions / s", figure(decisions["per_second"], missing="none")),
            ("decision latency p50 / p99", f"{figure(latency['p50'], ' ms', 'none timed')} / "
                                           f"{figure(latency['p99'], ' ms', 'none timed')}"),
            ("wall time", figure(run["wall_s"], " s")),
            ("invariant violations", figure(audited, missing="not audited"))]


def summary(report: Mapping[str, Any], seconds: float) -> str:
    """The few lines `tidal simulate` prints at the end of a run."""
    gpu, pods, d = report["gpu"], report["pods"], report["decisions"]
    latency = d["latency_ms"]
    lines = [f"workload {report['run']['workload']}: {report['run']['nodes']} nodes, {pods['arrived']} pods arrived, "
             f"{pods['running']} running, {pods['pending']} pending"]
    if pods["pending_by_reason"]:
        lines.append("pending pods by reason:")
        lines += mapping_lines(pods["pending_by_reason"])
    if gpu.get("allocation_pct_by_arrived"):
        lines.append("GPU allocation at arrived " + " / ".join(f"{k} %" for k in SUMMARY_LEVELS) + ": "
                     + " / ".join(gpu_level(gpu, k) for k in SUMMARY_LEVELS)
                     + f"; unallocated GPUs at the end {figure(gpu.get('unallocated_gpus_final'))}")
    lines.append(f"decisions {d['count']} ({figure(d['per_second'], '/s', 'none')}), latency p50 "
                 f"{figure(latency['p50'], ' ms', 'none timed')} p99 {figure(latency['p99'], ' ms', 'none timed')}; "
                 f"CPU utilisation mean {figure(report['cpu']['utilisation_pct_mean'], ' %', 'not measured')}")
    actions = report["actions"]["requested"]
    if actions:
        lines.append("actions: " + "; ".join(f"{by}: {pairs(kinds)}" for by, kinds in actions.items()))
    lines.append(f"invariant violations: {report['invariants']['violations']}")
    lines += [f"  {line}" for line in report["invariants"]["lines"][:10]]
    agents = report.get("node_agents")
    if agents:
        lines.append(node_agents_line(agents))
    for e in report["expectations"]:
        lines.append(f"  [{'ok' if e['ok'] else 'FAIL'}] {e['expect']} — {e['seen']}")
    lines.append(f"took {seconds:.1f} s")
    return "\n".join(lines)


def node_agents_line(agents: Mapping[str, Any]) -> str:
    """`node agents: audit violations N, cgroup writes …`, naming the kinds
    found when there are any."""
    found = {k: n for k, n in agents["audit_violations"].items() if n}
    total = sum(agents["audit_violations"].values())
    detail = f" ({pairs(found)})" if found else ""
    return f"node agents: audit violations {total}{detail}, cgroup writes {pairs(agents['cgroup_writes'])}"
