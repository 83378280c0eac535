"""The node audit (pure): the agent's books against the cpusets the kernel
enforces. Four kinds of violation, each of which must stay at 0:

- `double-booked`: a CPU held by two exclusive pods — in the books, or in
  the cgroups of two pods the books give exclusive CPUs;
- `leaked`: an exclusive CPU in the cgroup cpuset of any other pod;
- `orphaned`: exclusive CPUs held for a pod that is not live here (a claim
  still awaiting its bind is not judged: the bind timeout ends it);
- `drifted`: a pod cgroup whose cpuset is not the one `cpuset_plan` expects.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from .checkpoint import CpuState
from .cpuset import format_cpuset
from .cpuset_plan import Pinning, pods_by_uid

KINDS = ("double-booked", "leaked", "orphaned", "drifted")


@dataclass(frozen=True)
class Violation:
    kind: str
    pod: str
    detail: str


def audit(state: CpuState, expected: Mapping[str, Pinning], actual: Mapping[str, Collection[int]],
          live: Collection[str], names: Mapping[str, str] | None = None) -> list[Violation]:
    """Every violation (see the module docstring). `actual`: uid -> the
    cpuset its cgroup has; `expected`: uid -> `cpuset_plan` pinning; `live`:
    the pod keys alive on this node; `names`: uid -> pod key of pods the
    books do not name (to say which pod a violation is about)."""
    found: list[Violation] = []
    named = {**(names or {}), **pods_by_uid(state)}
    booked = Counter(cpu for cpus in state.assignments.values() for cpu in cpus)
    seen: Counter[int] = Counter()
    for uid, cpus in actual.items():
        key = named.get(uid)
        if key is not None and state.held_by(key):
            seen.update(set(cpus) & state.assigned)
    for cpu in sorted(c for c in set(booked) | set(seen) if max(booked[c], seen[c]) > 1):
        holders = sorted(pod for (pod, _), cpus in state.assignments.items() if cpu in cpus)
        found.append(Violation("double-booked", ", ".join(holders), f"cpu {cpu}"))
    for uid, cpus in sorted(actual.items()):
        key = named.get(uid, "")
        others = (set(cpus) & state.assigned) - state.held_by(key)
        if others:
            owners = sorted({pod for (pod, _), held in state.assignments.items() if held & others})
            found.append(Violation("leaked", key or f"uid {uid}",
                                   f"runs on cpus {format_cpuset(others)} held by {', '.join(owners)}"))
    for (pod, _), cpus in sorted(state.assignments.items()):
        claim = state.claims.get(pod)
        if pod not in live and (claim is None or claim.stage != "decided"):
            found.append(Violation("orphaned", pod, f"holds cpus {format_cpuset(cpus)} with no live pod here"))
    for uid, pin in sorted(expected.items()):
        now = tuple(sorted(actual.get(uid, ()))) if uid in actual else None
        if now is not None and now != pin.cpus:
            found.append(Violation("drifted", pin.pod or named.get(uid, f"uid {uid}"),
                                   f"cpuset {format_cpuset(now)}, expected {format_cpuset(pin.cpus)}"))
    return found


def counts(violations: Collection[Violation]) -> dict[str, int]:
    """Violations per kind, every kind present."""
    tally = Counter(v.kind for v in violations)
    return {kind: tally[kind] for kind in KINDS}
