"""§B scheduling a container that needs d GPUs inside its tenant's groups.

1. Quota per resource type (a GPU model, in milli-GPU):
   `can_take = limit − allocated`; a type without a limit is unlimited. A
   model whose `can_take` is below the ask is not offered; when that
   leaves nothing the pod waits with reason "quota".
2. Candidate groups: the tenant's, matching the container identifier if
   the pod names one (group name or `container_id`), holding GPUs of an
   allowed model / kind.
3. Keep (group, node) pairs where the group has ≥ d usable GPUs free on
   that single node (whole GPUs: fully free; a share: ≥ its milli free).
4. Best fit: the smallest group leftover (free GPUs of the group on all
   nodes after the placement), then the smallest leftover on the node,
   then group and node name. The result names the node and GPU ids.
Free figures are read per GPU from the scheduler cache, so GPUs shared by
overlapping groups are never counted twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .cluster_state import GPU_MILLI, ClusterState
from .gpu_groups import Group, Grouping


@dataclass(frozen=True)
class GroupAsk:
    """A container's GPU need: `count` GPUs of `milli` each (a share when
    count is 1 and milli < 1000), allowed models/kind, container id."""

    count: int
    milli: int = GPU_MILLI
    models: tuple[str, ...] = ()
    kind: str | None = None
    container: str | None = None

    @property
    def share(self) -> bool:
        return self.count == 1 and self.milli < GPU_MILLI


@dataclass(frozen=True)
class GroupChoice:
    """The chosen group, node and GPU ids — or `ok` False and why."""

    ok: bool
    reason: str = ""
    group: str | None = None
    node: str | None = None
    gpus: tuple[str, ...] = ()
    model: str | None = None
    leftover: int = 0


def can_take(limit: int, allocated: int) -> int:
    """How much more of a resource type the tenant may get (never below 0)."""
    return max(limit - allocated, 0)


def choose_group(state: ClusterState, grouping: Grouping, ask: GroupAsk,
                 allocated: Mapping[str, int]) -> GroupChoice:
    """Best-fit group placement for one container (see the module docstring);
    `allocated` is the tenant's milli-GPU held per model."""
    need = ask.count * ask.milli
    groups = [g for g in grouping.groups if ask.container is None or ask.container in (g.name, g.container_id)]
    if not groups:
        return GroupChoice(False, f"no group of tenant {grouping.tenant} matches {ask.container or 'the pod'}")
    best: tuple | None = None
    quota_blocked = typed = False
    for group in groups:
        usable = _usable(state, group, ask)
        if not usable:
            continue
        typed = True
        room = {m: can_take(grouping.quota[m], allocated.get(m, 0)) if m in grouping.quota else need
                for m in {model for _, _, model, _ in usable}}
        fresh = [u for u in usable if room[u[2]] >= need]
        quota_blocked |= len(fresh) < len(usable)
        per_node: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
        for node, col, model, free in fresh:  # one container's GPUs: one node, one model
            per_node.setdefault((node, model), []).append((col, model, free))
        unit = ask.milli if ask.share else 1
        total = sum(free if ask.share else 1 for *_, free in fresh)
        for (node, _), devices in sorted(per_node.items()):
            if len(devices) < (1 if ask.share else ask.count):
                continue
            picked = _pick(devices, ask)
            node_free = sum(free if ask.share else 1 for *_, free in devices)
            key = (total - (unit if ask.share else ask.count), node_free - (unit if ask.share else ask.count),
                   group.name, node)
            if best is None or key < best[0]:
                best = (key, group.name, node, picked)
    if best is None:
        if quota_blocked:
            return GroupChoice(False, "quota")
        if not typed:
            return GroupChoice(False, "no group holds a usable GPU of the requested type")
        return GroupChoice(False, f"no group has {ask.count} free GPU(s) on one node")
    (leftover, *_), name, node, picked = best
    r = state.rows[node]
    return GroupChoice(True, group=name, node=node, gpus=tuple(state.gpu_id(r, col) for col, _ in picked),
                       model=picked[0][1], leftover=leftover)


def _usable(state: ClusterState, group: Group, ask: GroupAsk) -> list[tuple[str, int, str, int]]:
    """(node, device column, model, milli free) of the group's GPUs this
    ask may use and that have room for it."""
    out = []
    for node in group.nodes:
        r = state.rows.get(node)
        if r is None or not state.schedulable[r]:
            continue
        ids = group.on_node(node)
        for col, gpu in enumerate(state.specs[r].gpu_ids):
            if gpu not in ids or not state.gpu_valid[r, col]:
                continue
            model = state.models[state.gpu_dev_model[r, col]]
            if ask.models and model not in ask.models:
                continue
            if ask.kind and bool(state.gpu_virtual[r, col]) != (ask.kind == "virtual"):
                continue
            free = int(state.gpu_free[r, col])
            if free >= (ask.milli if ask.share else GPU_MILLI):
                out.append((node, col, model, free))
    return out


def _pick(devices: list[tuple[int, str, int]], ask: GroupAsk) -> list[tuple[int, str]]:
    if ask.share:  # pack shares: the device with the least room that fits
        col, model, _ = min(devices, key=lambda d: (d[2], d[0]))
        return [(col, model)]
    return [(col, model) for col, model, _ in sorted(devices)[:ask.count]]


def group_mask(state: ClusterState, choice: GroupChoice) -> np.ndarray:
    """(rows × device columns) mask allowing only the chosen GPUs, to pass
    as `decide(..., allowed=...)` so CPUs/NUMA are chosen on that node."""
    mask = np.zeros((state.size, state.gpu_cols), dtype=bool)
    if choice.ok:
        r = state.rows[choice.node]
        for col, gpu in enumerate(state.specs[r].gpu_ids):
            mask[r, col] = gpu in choice.gpus
    return mask
