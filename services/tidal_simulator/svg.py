"""Plain inline-SVG charts (pure string building, no scripts, no network):
a line chart with optional reference points, a heat map and an event
timeline. Every chart is one `<svg id=…>` element with a `<title>`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")
W, H, ML, MR, MT, MB = 760, 340, 60, 170, 20, 45


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]
    color: str = ""
    markers_only: bool = False
    extra: dict = field(default_factory=dict)


def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) * (b - a) / span


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    step = (hi - lo) / n if hi > lo else 1.0
    return [lo + i * step for i in range(n + 1)]


def _frame(chart_id: str, title: str, body: list[str], width: int = W, height: int = H) -> str:
    return (f'<svg id="{escape(chart_id)}" class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img"><title>{escape(title)}</title>'
            + "".join(body) + "</svg>")


def line_chart(chart_id: str, title: str, series: Sequence[Series], x_label: str, y_label: str,
               x_range: tuple[float, float] | None = None, y_range: tuple[float, float] | None = None) -> str:
    """Lines (or markers) of `series` on shared axes, with a legend."""
    xs = [x for s in series for x, _ in s.points] or [0.0, 1.0]
    ys = [y for s in series for _, y in s.points] or [0.0, 1.0]
    x0, x1 = x_range or (min(xs), max(xs))
    y0, y1 = y_range or (min(ys), max(ys))
    fx, fy = _scale(x0, x1, ML, W - MR), _scale(y0, y1, H - MB, MT)
    body = [f'<rect x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="#fafafa" stroke="#999"/>']
    for t in _ticks(x0, x1):
        body.append(f'<line x1="{fx(t):.1f}" y1="{H - MB}" x2="{fx(t):.1f}" y2="{H - MB + 4}" stroke="#333"/>'
                    f'<text x="{fx(t):.1f}" y="{H - MB + 16}" font-size="11" text-anchor="middle">{t:.4g}</text>')
    for t in _ticks(y0, y1):
        body.append(f'<line x1="{ML}" y1="{fy(t):.1f}" x2="{W - MR}" y2="{fy(t):.1f}" stroke="#e4e4e4"/>'
                    f'<text x="{ML - 6}" y="{fy(t) + 4:.1f}" font-size="11" text-anchor="end">{t:.4g}</text>')
    body.append(f'<text x="{(ML + W - MR) / 2}" y="{H - 8}" font-size="12" text-anchor="middle">{escape(x_label)}</text>'
                f'<text x="14" y="{(MT + H - MB) / 2}" font-size="12" text-anchor="middle" '
                f'transform="rotate(-90 14 {(MT + H - MB) / 2})">{escape(y_label)}</text>')
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        pts = [(fx(x), fy(y)) for x, y in s.points if x0 <= x <= x1]
        if not s.markers_only and len(pts) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            body.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" points="{path}">'
                        f'<title>{escape(s.label)}</title></polyline>')
        if s.markers_only or len(pts) == 1:
            for (x, y), (vx, vy) in zip(pts, [p for p in s.points if x0 <= p[0] <= x1]):
                body.append(f'<circle class="ref" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}">'
                            f'<title>{escape(s.label)}: {vy:.2f} at {vx:g}</title></circle>')
        ly = MT + 14 + 16 * i
        body.append(f'<rect x="{W - MR + 10}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
                    f'<text x="{W - MR + 24}" y="{ly}" font-size="11">{escape(s.label[:26])}</text>')
    return _frame(chart_id, title, body)


def heat_color(v: float | None) -> str:
    """White (0) → yellow (0.5) → red (1); grey for no value."""
    if v is None:
        return "#dddddd"
    v = min(max(v, 0.0), 1.0)
    if v < 0.5:
        return f"rgb(255,255,{int(255 * (1 - 2 * v))})"
    return f"rgb(255,{int(255 * (2 - 2 * v))},0)"


def heat_map(chart_id: str, title: str, rows: Sequence[str], columns: Sequence[float],
             values: Sequence[Sequence[float | None]], x_label: str) -> str:
    """One row per label, one cell per column (e.g. tick), coloured by value."""
    cell_h = 12 if len(rows) <= 60 else 6
    left, width = 150, W - 150 - 20
    height = MT + cell_h * max(len(rows), 1) + 50
    cell_w = width / max(len(columns), 1)
    body = []
    for r, label in enumerate(rows):
        y = MT + r * cell_h
        if cell_h >= 10:
            body.append(f'<text x="{left - 4}" y="{y + cell_h - 2}" font-size="10" text-anchor="end">'
                        f'{escape(label)}</text>')
        for c, value in enumerate(values[r]):
            body.append(f'<rect class="cell" x="{left + c * cell_w:.1f}" y="{y}" width="{cell_w + 0.3:.1f}" '
                        f'height="{cell_h}" fill="{heat_color(value)}"><title>{escape(label)} @ {columns[c]:g}: '
                        f'{"-" if value is None else f"{value:.2f}"}</title></rect>')
    bottom = MT + cell_h * len(rows)
    if columns:
        for t in _ticks(0, len(columns) - 1, min(5, len(columns) - 1)) if len(columns) > 1 else [0]:
            x = left + (t + 0.5) * cell_w
            body.append(f'<text x="{x:.1f}" y="{bottom + 14}" font-size="11" text-anchor="middle">'
                        f'{columns[int(round(t))]:g}</text>')
    body.append(f'<text x="{left + width / 2}" y="{bottom + 32}" font-size="12" text-anchor="middle">'
                f'{escape(x_label)}</text>')
    return _frame(chart_id, title, body, W, height)


def timeline(chart_id: str, title: str, lanes: Sequence[str], events: Sequence[tuple[float, str, str]],
             x_range: tuple[float, float], x_label: str) -> str:
    """Events (time, lane, text) as ticks on one lane per kind."""
    lane_h = 26
    height = MT + lane_h * max(len(lanes), 1) + 50
    left = 110
    fx = _scale(x_range[0], x_range[1], left, W - 20)
    body = []
    for i, lane in enumerate(lanes):
        y = MT + i * lane_h + lane_h / 2
        body.append(f'<line x1="{left}" y1="{y}" x2="{W - 20}" y2="{y}" stroke="#ddd"/>'
                    f'<text x="{left - 6}" y="{y + 4}" font-size="11" text-anchor="end">{escape(lane)}</text>')
    for t, lane, text in events:
        if lane not in lanes:
            continue
        y = MT + lanes.index(lane) * lane_h + lane_h / 2
        color = PALETTE[lanes.index(lane) % len(PALETTE)]
        body.append(f'<rect class="event" x="{fx(t) - 2:.1f}" y="{y - 8}" width="4" height="16" fill="{color}">'
                    f'<title>{t:g} s: {escape(text)}</title></rect>')
    bottom = MT + lane_h * len(lanes)
    for t in _ticks(*x_range):
        body.append(f'<text x="{fx(t):.1f}" y="{bottom + 14}" font-size="11" text-anchor="middle">{t:.4g}</text>')
    body.append(f'<text x="{(left + W) / 2}" y="{bottom + 32}" font-size="12" text-anchor="middle">'
                f'{escape(x_label)}</text>')
    return _frame(chart_id, title, body, W, height)
