"""Whether an action a service decides is carried out or only shown: one
switch per kind of action, `enabled` or `dry-run`.

A dry-run action is decided, logged, counted (`tidal_node_actions_total{
dry_run="true"}`) and published marked `dry_run`; the actuators (the
bridge, the node agent) skip it, the auditor does not count it as done, and
the action memory does not remember it (no cool-down, no retry), so it is
decided again on the next sample for as long as its cause lasts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

ActionMode = Literal["enabled", "dry-run"]
ENABLED: ActionMode = "enabled"
DRY_RUN: ActionMode = "dry-run"


def dry_run_kinds(modes: Mapping[str, ActionMode], every: bool = False) -> frozenset[str]:
    """The action kinds to publish dry-run: those `modes` ({kind: mode})
    sets to `dry-run`, or every kind it names when `every` (the deprecated
    service-wide `dry_run: true`)."""
    return frozenset(kind for kind, mode in modes.items() if every or mode == DRY_RUN)


def dry_run_notice(kinds: frozenset[str], every: bool, enable: str) -> str:
    """The line a service logs at start about what it only shows ("" when
    it acts on everything); `enable` says how to turn the actions on."""
    if not kinds:
        return ""
    why = ("dry_run is set (deprecated: use the per-action settings)" if every
           else f"the default until enabled, e.g. {enable}")
    return f"dry run: {', '.join(sorted(kinds))} decided and published marked dry_run, not carried out ({why})"
