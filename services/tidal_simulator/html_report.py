"""The self-contained HTML report: key figures and four inline-SVG plots —
GPU allocation vs arrived load (with the published FGD/BestFit medians when
the run is the openb default trace), a per-node NUMA load heat map, the
fair-share scores over time and the actions timeline. No scripts, no
network: it opens anywhere."""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any

from .recorder import Recorder
from .report_text import figure, figures
from .svg import Series, heat_map, line_chart, timeline

ACTION_LANES = ["taint", "untaint", "evict", "freeze", "thaw", "set-cpuset", "bind-failed"]
REFERENCE_COLORS = {"06-FGD": "#2ca02c", "05-BestFit": "#ff7f0e"}
MAX_HEAT_ROWS = 60


def allocation_plot(report: dict[str, Any], record: Recorder, reference: dict[str, dict[str, float]]) -> str:
    gpu = report["gpu"]
    curve = [(float(k), v) for k, v in gpu.get("allocation_pct_by_arrived", {}).items() if v is not None]
    capacity = gpu.get("capacity_gpus", 0) * 1000
    series = []
    if capacity and record.arrivals:
        step = max(len(record.arrivals) // 400, 1)
        raw = [(100 * a.arrived / capacity, 100 * a.allocated / capacity) for a in record.arrivals[::step]]
        series.append(Series("every arrival", raw, "#aec7e8"))
    series.append(Series("this run (per level)", curve, "#1f77b4"))
    for policy, color in REFERENCE_COLORS.items():
        if policy in reference:
            points = sorted((float(k), v) for k, v in reference[policy].items())
            series.append(Series(f"published {policy[3:]}", points, color, markers_only=True))
    return line_chart("plot-allocation", "GPU allocation vs arrived load", series,
                      "arrived GPU request, % of capacity", "GPUs allocated, % of capacity",
                      x_range=(0, 135), y_range=(0, 100))


def numa_heat_plot(record: Recorder) -> str:
    rows: dict[str, list[float | None]] = {}
    ticks = record.ticks
    for i, tick in enumerate(ticks):
        for node, loads in tick.numa_load.items():
            for numa, load in loads.items():
                rows.setdefault(f"{node}/numa{numa}", [None] * len(ticks))[i] = load
    if not rows:
        return ('<p id="numa-note">No NUMA figures: the nodes carry no NUMA detail (openb trace nodes '
                'are known by totals only).</p>' + heat_map("plot-numa-heatmap", "NUMA load per node (none)", [],
                                                             [t.t_s for t in ticks], [], "scenario time, s"))
    hottest = sorted(rows, key=lambda r: (-max(v for v in rows[r] if v is not None), r))[:MAX_HEAT_ROWS]
    labels = sorted(hottest)
    title = f"NUMA load per node ({len(labels)} of {len(rows)} NUMA nodes, hottest first kept)"
    return heat_map("plot-numa-heatmap", title, labels, [t.t_s for t in ticks], [rows[r] for r in labels],
                    "scenario time, s")


def fair_share_plot(scores: Sequence[dict]) -> str:
    by_key: dict[str, list[tuple[float, float]]] = {}
    for s in scores:
        by_key.setdefault(f"{s['user']} / {s['resource_type']}", []).append((s["t"], s["score"]))
    top = sorted(by_key, key=lambda k: -max(v for _, v in by_key[k]))[:10]
    series = [Series(k, sorted(by_key[k])) for k in sorted(top)]
    return line_chart("plot-fairshare", "Fair-share scores over time (scoring service, §C)", series,
                      "seconds since the run started (wall clock)", "score (decayed usage)")


def usage_share_plot(record: Recorder, kind: str = "cpu") -> str:
    tenants = sorted({t for tick in record.ticks for t in tick.tenant_usage})
    series = []
    for tenant in tenants:
        points = []
        for tick in record.ticks:
            total = sum(u.get(kind, 0.0) for u in tick.tenant_usage.values())
            points.append((tick.t_s, tick.tenant_usage.get(tenant, {}).get(kind, 0.0) / total if total else 0.0))
        series.append(Series(tenant, points))
    return line_chart("plot-usage-share", f"Share of allocated {kind} per tenant", series[:10],
                      "scenario time, s", "share", y_range=(0, 1))


def actions_plot(record: Recorder) -> str:
    events = [(h.t_s, h.kind, f"{h.kind} {h.pod or h.node or ''} {h.detail}".strip())
              for h in record.timeline if h.kind in ACTION_LANES]
    end = max([t.t_s for t in record.ticks] + [e[0] for e in events] + [1.0])
    return timeline("plot-actions", f"Actions timeline ({len(events)} carried out or failed binds)", ACTION_LANES,
                    events, (0.0, end), "scenario time, s")


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _invariants(report: dict[str, Any]) -> str:
    found = report.get("invariants") or {}
    lines = found.get("lines") or []
    verdict = f"<p>invariant violations: {escape(figure(found.get('violations'), missing='not audited'))}</p>"
    if lines:
        verdict += f"<pre>{escape(chr(10).join(lines))}</pre>"
    agents = report.get("node_agents")
    if not agents:
        return verdict
    audits = _table([(k, figure(n)) for k, n in agents["audit_violations"].items()], ["kind", "violations"])
    writes = _table([(k, figure(n)) for k, n in agents["cgroup_writes"].items()], ["cgroup write", "count"]) \
        if agents["cgroup_writes"] else "<p>No cgroup writes.</p>"
    return f"{verdict}<p>The node agents' own audits at the end:</p>{audits}{writes}"


def render_html(report: dict[str, Any], record: Recorder, fair_share: Sequence[dict],
                reference: dict[str, dict[str, float]]) -> str:
    """The whole page."""
    run, pods = report["run"], report["pods"]
    expectations = report.get("expectations") or []
    verdicts = _table([("pass" if e["ok"] else "FAIL", e["expect"], e["seen"]) for e in expectations],
                      ["", "expected", "seen"]) if expectations else "<p>No expectations.</p>"
    fair = (fair_share_plot(fair_share) if fair_share else
            "<p>No fair-share scores were published during the run (is the scoring service running?).</p>")
    fairness_rows = [(k, v["tenants"], figure(v["jain_usage_share"], missing="nothing allocated"),
                      figure(v["jain_satisfaction"], missing="no demand known"))
                     for k, v in report["fairness"].items()]
    pending = _table(sorted(pods["pending_by_reason"].items()), ["reason", "pods"]) if pods["pending_by_reason"] \
        else "<p>No pod left pending.</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Tidal simulation: {escape(run['workload'])}</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:1000px}}table{{border-collapse:collapse;margin:8px 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}}h2{{margin-top:28px}}
svg.plot{{display:block;margin:8px 0}}pre{{background:#f4f4f4;padding:8px;font-size:12px;overflow:auto}}</style>
</head><body>
<h1>Tidal simulation: {escape(run['workload'])}</h1>
{_table(figures(report), ["figure", "value"])}
<h2>Expectations</h2>{verdicts}
<h2>Invariants (tidal audit)</h2>{_invariants(report)}
<h2>GPU allocation vs arrived load</h2>{allocation_plot(report, record, reference)}
<h2>NUMA load heat map</h2>{numa_heat_plot(record)}
<h2>Fair share</h2>{fair}{usage_share_plot(record)}
{_table(fairness_rows, ["resource", "tenants", "Jain (usage share)", "Jain (satisfaction)"])}
<h2>Actions</h2>{actions_plot(record)}
<h2>Pending pods by reason</h2>{pending}
<h2>Report (JSON)</h2><pre>{escape(json.dumps(report, indent=1, default=str))}</pre>
</body></html>
"""
