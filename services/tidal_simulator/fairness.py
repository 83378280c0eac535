"""Fair-share fairness of a run (pure): Jain's index over tenants.

    J(x) = (Σ x_i)² / (n · Σ x_i²),  1/n ≤ J ≤ 1, 1 when all x_i are equal

Per resource type (CPU, memory, each GPU model) two views: `usage_share`,
x_i = tenant i's share of what is allocated of that type; `satisfaction`,
x_i = allocated_i / demanded_i (the part of what tenant i asked for that it
got), over the tenants that asked for the type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def jain(values: Sequence[float]) -> float | None:
    """Jain's index of `values`; None when there are none or all are 0."""
    total = sum(values)
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return None
    return total * total / (len(values) * squares)


def fairness(allocated: Mapping[str, Mapping[str, float]],
             demanded: Mapping[str, Mapping[str, float]]) -> dict[str, dict]:
    """Per resource type: shares of the allocation by tenant, their Jain
    index, and the Jain index of demand satisfaction (module docstring).
    Both mappings are tenant → resource type → amount."""
    kinds = sorted({k for per in demanded.values() for k, v in per.items() if v > 0}
                   | {k for per in allocated.values() for k, v in per.items() if v > 0})
    out = {}
    for kind in kinds:
        tenants = sorted(t for t in set(allocated) | set(demanded)
                         if demanded.get(t, {}).get(kind, 0) > 0 or allocated.get(t, {}).get(kind, 0) > 0)
        held = {t: float(allocated.get(t, {}).get(kind, 0.0)) for t in tenants}
        total = sum(held.values())
        shares = {t: (v / total if total else 0.0) for t, v in held.items()}
        asked = {t: float(demanded.get(t, {}).get(kind, 0.0)) for t in tenants}
        satisfied = [min(held[t] / asked[t], 1.0) for t in tenants if asked[t] > 0]
        out[kind] = {"tenants": len(tenants), "usage_share": {t: round(v, 4) for t, v in shares.items()},
                     "jain_usage_share": _round(jain(list(shares.values()))),
                     "satisfaction": {t: round(min(held[t] / asked[t], 1.0), 4) for t in tenants if asked[t] > 0},
                     "jain_satisfaction": _round(jain(satisfied))}
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
