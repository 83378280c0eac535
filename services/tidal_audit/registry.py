"""Every invariant the auditor checks, by name (an explicit registry), and
the audit itself: every event of one cluster, in the order the broker
stored them, fed to every check (pure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tidal_schemas import Envelope

from . import id_reused, ineligible_action, over_allocated, over_quota, placed_twice, rolled_back, shared_cpu
from .violation import Check, Violation

CHECKS: dict[str, Callable[[], Check]] = {
    placed_twice.NAME: placed_twice.PlacedTwice,
    over_allocated.NAME: over_allocated.OverAllocated,
    shared_cpu.NAME: shared_cpu.CpuInTwoSets,
    over_quota.NAME: over_quota.OverQuota,
    ineligible_action.NAME: ineligible_action.IneligibleAction,
    rolled_back.NAME: rolled_back.BindNotRolledBack,
    id_reused.NAME: id_reused.DecisionIdReused,
}
STREAMS = ("node.topology", "node.allocatable", "tenant.config", "pod.lifecycle", "placement.decision",
           "bind.result", "cpu.assignment", "node.metrics", "node.action", "action.result")


def audit(events: Iterable[Envelope[Any]], cluster: str | None = None,
          checks: Iterable[str] | None = None) -> list[Violation]:
    """The violations `events` (in order) prove, of `cluster`'s events only
    when given, by the named checks (default: all)."""
    running = [CHECKS[name]() for name in (checks or CHECKS)]
    found: list[Violation] = []
    for envelope in events:
        if cluster is not None and envelope.cluster != cluster:
            continue
        for check in running:
            found += check.feed(envelope)
    return found
