"""The JSON report of a run (pure over what the run recorded).

GPU allocation per arrived level uses the placement team's averaging
(`openb_replay.alloc_curve`): arrived = cumulative milli-GPU requested by
the pods that have arrived, placed or not, in % of cluster GPU capacity;
for each level L in 50, 55 … 130 the mean allocation over the log lines at
round(arrived %) = L (±1 when none is exactly there), null when the run
never got near L.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tidal_simulator.openb_replay import LEVELS, ReplayLog, alloc_curve, frag_curve, frag_ratio_curve

from .expectations import Verdict
from .fairness import fairness
from .recorder import Recorder
from .workload import Workload

PUBLISHED_POLICIES = {"05-BestFit": "best-fit", "06-FGD": "fgd"}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation); None for no values."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def reason_class(outcome: str, reason: str, filtered: dict[str, int]) -> str:
    """A short name for why a pod is pending: the filter that removed the
    most nodes, else the reason up to its first colon."""
    if outcome == "undecided":
        return "undecided"
    if filtered:
        return max(sorted(filtered), key=lambda k: filtered[k])
    return (reason.split(":")[0].strip() or "unknown")[:60]


def replay_log(record: Recorder, capacity_milli: int) -> ReplayLog | None:
    """The arrival log in the placement team's `ReplayLog` shape."""
    lines = record.arrivals
    if not lines or capacity_milli <= 0:
        return None
    column = lambda name: np.array([getattr(a, name) for a in lines], dtype=np.float64)  # noqa: E731
    return ReplayLog(capacity_milli, column("arrived"), column("allocated"), column("frag"), column("idle"),
                     np.array([a.placed for a in lines], dtype=bool))


def _clean(curve: dict[int, float]) -> dict[str, float | None]:
    return {str(k): (None if math.isnan(v) else v) for k, v in curve.items()}


def gpu_section(record: Recorder, capacity_milli: int) -> dict[str, Any]:
    log = replay_log(record, capacity_milli)
    if log is None:
        return {"capacity_gpus": capacity_milli / 1000, "arrivals_logged": 0}
    alloc = _clean(alloc_curve(log, LEVELS))
    last = record.arrivals[-1]
    at_100 = alloc.get("100")
    return {
        "capacity_gpus": capacity_milli / 1000,
        "arrivals_logged": len(record.arrivals),
        "arrived_pct_final": round(100 * last.arrived / capacity_milli, 2),
        "allocation_pct_by_arrived": alloc,
        "fragmentation_pct_by_arrived": _clean(frag_curve(log, LEVELS)),
        "fragmentation_of_idle_pct_by_arrived": _clean(frag_ratio_curve(log, LEVELS)),
        "allocated_pct_final": round(100 * last.allocated / capacity_milli, 2),
        "unallocated_gpus_final": round((capacity_milli - last.allocated) / 1000, 2),
        "unallocated_gpus_at_100": None if at_100 is None else round(capacity_milli * (1 - at_100 / 100) / 1000, 1),
        "fragmented_gpus_final": round(last.frag / 1000, 2),
    }


def build_report(workload: Workload, record: Recorder, model, *, wall_s: float, release_wall_s: float,
                 verdicts: Sequence[Verdict] = (), fair_share: Sequence[dict] = (), extra: dict | None = None
                 ) -> dict[str, Any]:
    """Everything the run measured, as JSON-ready data."""
    pods = model.pods.values()
    arrived = [p for p in pods if p.phase != "waiting"]
    pending = [p for p in arrived if p.phase == "pending"]
    by_reason = Counter(reason_class(*record.last_decision.get(p.key, ("undecided", "", {}))) for p in pending)
    latencies = [v * 1000 for v in record.latencies_s.values()]
    cpu_capacity = max(workload.cpu_capacity_milli(), 1)
    ticks = record.ticks
    demanded: dict[str, dict[str, float]] = {}
    for p in arrived:
        asked = demanded.setdefault(p.request.tenant, {})
        asked["cpu"] = asked.get("cpu", 0.0) + p.request.requests.cpu_milli
        asked["memory"] = asked.get("memory", 0.0) + p.request.requests.memory_mib
        if p.request.gpu.count:  # demand is known per pod, not per model it may use
            asked["gpu"] = asked.get("gpu", 0.0) + p.request.gpu.total_milli
    allocated = ticks[-1].tenant_usage if ticks else {}
    actions: dict[str, dict[str, int]] = {}
    for (by, kind), n in sorted(record.actions.items()):
        actions.setdefault(by, {})[kind] = n
    report = {
        "run": {"workload": workload.name, "source": workload.source, "nodes": len(workload.nodes),
                "pods": len(workload.pods), "wall_s": round(wall_s, 2), "scenario_s": ticks[-1].t_s if ticks else 0.0,
                **(extra or {})},
        "gpu": gpu_section(record, workload.gpu_capacity_milli()),
        "cpu": {
            "capacity_cpus": cpu_capacity / 1000,
            "requested_pct_final": round(100 * ticks[-1].cpu_requested / cpu_capacity, 2) if ticks else None,
            "utilisation_pct_final": round(100 * ticks[-1].cpu_used / cpu_capacity, 2) if ticks else None,
            "utilisation_pct_mean": round(100 * float(np.mean([t.cpu_used for t in ticks])) / cpu_capacity, 2)
            if ticks else None,
        },
        "pods": {"arrived": len(arrived), "running": sum(1 for p in arrived if p.phase == "running"),
                 "pending": len(pending), "deleted": sum(1 for p in arrived if p.phase == "deleted"),
                 "failed": sum(1 for p in arrived if p.phase == "failed"),
                 "pending_by_reason": dict(by_reason.most_common()),
                 "bind_results": dict(record.bind_results)},
        "decisions": {"count": record.decisions,
                      "per_second": round(record.decisions / release_wall_s, 1) if release_wall_s > 0 else None,
                      "latency_ms": {"p50": _r(percentile(latencies, 50)), "p99": _r(percentile(latencies, 99)),
                                     "max": _r(max(latencies) if latencies else None), "pods": len(latencies)}},
        "fairness": fairness(allocated, demanded),
        "fair_share_scores": {"published": len(fair_share)},
        "actions": {"requested": actions,
                    "results": {f"{kind}/{status}": n for (kind, status), n in sorted(record.results.items())},
                    "allocatable_updates": record.allocatable_events},
        "expectations": [{"expect": v.expectation, "ok": v.ok, "seen": v.seen} for v in verdicts],
    }
    return report


def published_reference(pods_csv: str | Path, nodes_csv: str | Path) -> dict[str, dict[str, float]]:
    """The authors' published medians (policy → arrived level → GPU
    allocation %) when the run is the openb default trace on the GPU-node
    cluster and `published_results_default.csv` sits beside it; else {}."""
    pods_csv, nodes_csv = Path(pods_csv), Path(nodes_csv)
    path = pods_csv.parent / "published_results_default.csv"
    if pods_csv.name != "openb_pod_list_default.csv" or nodes_csv.name != "openb_node_list_gpu_node.csv" \
            or not path.exists():
        return {}
    out: dict[str, dict[str, float]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["workload"] == pods_csv.stem and row["metric"] == "alloc_ratio_pct":
                out.setdefault(row["policy"], {})[row["arrived_pct_of_gpu_capacity"]] = float(row["median"])
    return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
