"""What `tidal replay --set` prints and writes: the unchanged run (the
baseline, equal to the recording) and the changed run side by side, and
the pods that went elsewhere."""

from __future__ import annotations

from dataclasses import dataclass, field

from .replay_compare import Comparison
from .replay_plan import Window


@dataclass
class ReplayResult:
    cluster: str
    namespace: str
    window: Window
    overrides: dict[str, str] = field(default_factory=dict)
    comparison: Comparison = field(default_factory=lambda: Comparison(arrivals=0, same=0))
    invented: list[str] = field(default_factory=list)  # pods of the changed run bound on answers not recorded
    dropped: int = 0  # recorded answers to decisions the changed run did not take
    explain: dict[str, dict[str, str]] = field(default_factory=dict)  # pod that differs -> run -> its decision

    def to_json(self) -> dict:
        return {
            "cluster": self.cluster, "namespace": self.namespace, "invented": self.invented,
            "dropped": self.dropped, "explain": self.explain,
            "window": {"start": self.window.start, "end": self.window.end},
            "overrides": {f"placement.{k.replace('_', '-')}": v for k, v in self.overrides.items()},
            **self.comparison.to_json(),
        }


def describe(result: ReplayResult, show: int = 20) -> str:
    """The comparison as an operator reads it."""
    c = result.comparison
    start = result.window.start.isoformat() if result.window.start else "the first event"
    end = result.window.end.isoformat() if result.window.end else "the latest event"
    settings = ", ".join(f"placement.{k.replace('_', '-')}={v}" for k, v in result.overrides.items()) \
        or "none (placement's defaults)"
    lines = [f"what-if on cluster {result.cluster} (namespace {result.namespace}), pods arrived from {start} "
             f"to {end}",
             f"  changed: {settings}",
             "  baseline: the same journal with the recorded settings (equal to the recording, above); both runs "
             "read the same inputs at the same times, the cluster answering each run's own decisions",
             f"  not recorded: {len(result.invented)} pods of the changed run bound on answers the recording does "
             f"not hold (bound at once); {result.dropped} recorded answers dropped", ""]
    rows = [("pods placed", "placed", "{:d}"), ("GPU allocation %", "gpu_allocation_pct", "{:.2f}"),
            ("CPU allocation %", "cpu_allocation_pct", "{:.2f}"),
            ("GPU fragmentation (milli-GPU)", "frag_milli", "{:.1f}"),
            ("GPU fragmentation % of capacity", "frag_pct", "{:.2f}")]
    lines.append(f"  {'':<32}{'baseline':>10}{'changed':>10}")
    for label, name, fmt in rows:
        lines.append(f"  {label:<32}{fmt.format(getattr(c.recorded, name)):>10}"
                     f"{fmt.format(getattr(c.replay, name)):>10}")
    lines += ["", f"  {c.arrivals} pods arrived: {c.same} on the same node, {c.differs} differ "
                  f"({len(c.moved)} on another node, {len(c.only_recorded)} placed only in the baseline, "
                  f"{len(c.only_replay)} only in the changed run), {c.neither} placed by neither"]
    listed = [(pod, f"{before} → {after}") for pod, before, after in c.moved]
    listed += [(pod, f"{before} → pending ({why})") for pod, before, why in c.only_recorded]
    listed += [(pod, f"pending ({why}) → {after}") for pod, why, after in c.only_replay]
    for pod, change in listed[:show]:
        lines.append(f"    {pod:<40} {change}")
    if len(listed) > show:
        lines.append(f"    … and {len(listed) - show} more (--show N, or --report FILE for all)")
    return "\n".join(lines)
