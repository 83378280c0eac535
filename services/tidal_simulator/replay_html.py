"""`tidal replay --html`: the replay's verdict and the what-if's comparison
as one self-contained page (no scripts, no network), beside the
simulator's report."""

from __future__ import annotations

from html import escape

from .replay_exact import ExactReplay
from .replay_report import ReplayResult

ROWS = [("pods placed", "placed", "{:d}"), ("GPU allocation %", "gpu_allocation_pct", "{:.2f}"),
        ("CPU allocation %", "cpu_allocation_pct", "{:.2f}"), ("GPU fragmentation (milli-GPU)", "frag_milli", "{:.1f}"),
        ("GPU fragmentation % of capacity", "frag_pct", "{:.2f}")]


def render_replay_html(exact: ExactReplay, result: ReplayResult | None) -> str:
    parts = [f"<h1>Replay of cluster {escape(exact.cluster)}</h1>",
             f"<p class={'ok' if exact.equal else 'bad'}>{escape(exact.describe())}</p>"]
    if result is not None:
        c = result.comparison
        changed = ", ".join(f"placement.{k.replace('_', '-')}={v}" for k, v in result.overrides.items())
        parts.append(f"<h2>What-if: {escape(changed)}, against the unchanged run</h2>")
        rows = "".join(
            f"<tr><td>{label}</td><td>{fmt.format(getattr(c.recorded, name))}</td>"
            f"<td>{fmt.format(getattr(c.replay, name))}</td>"
            f"<td>{fmt.format(getattr(c.replay, name) - getattr(c.recorded, name))}</td></tr>"
            for label, name, fmt in ROWS)
        parts.append(f"<table><tr><th></th><th>baseline</th><th>changed</th><th>delta</th></tr>{rows}</table>")
        parts.append(f"<p>{c.arrivals} pods arrived: {c.same} on the same node, {c.differs} differ; "
                     f"{len(result.invented)} pods of the changed run bound on answers the recording does not hold, "
                     f"{result.dropped} recorded answers dropped.</p>")
        for pod, runs in result.explain.items():
            parts.append(f"<h3>{escape(pod)}</h3><table class=pod><tr><th>baseline</th><th>changed</th></tr>"
                         f"<tr><td><pre>{escape(runs['baseline'])}</pre></td>"
                         f"<td><pre>{escape(runs['changed'])}</pre></td></tr></table>")
    style = ("body{font-family:sans-serif;margin:2em;max-width:80em}td,th{border:1px solid #ccc;padding:.3em .6em;"
             "vertical-align:top}table{border-collapse:collapse;margin:.5em 0}.ok{color:#2a7a2a}.bad{color:#b22}"
             "pre{margin:0;font-size:.85em}")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>Tidal replay: {escape(exact.cluster)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")
