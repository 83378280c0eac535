"""§B scheduling a container that needs d GPUs inside its tenant's groups.

1. Candidate groups: the tenant's, matching the container identifier if
   the pod names one (group name or `container_id`), holding GPUs of an
   allowed model / kind. Quota and permissions are decided before (see
   `tenancy`) and arrive as `allowed`, the GPUs they leave the pod.
2. Keep (group, node) pairs where the node fits the rest of the pod (CPU,
   memory, exclusive CPUs: `fits`, from `decide.node_fit`, the filter
   `decide` itself applies) and the group has ≥ d usable GPUs free on that
   single node (whole GPUs: fully free; a share: ≥ its milli free).
3. Best fit: the smallest group leftover (free GPUs of the group on all
   nodes after the placement), then the smallest leftover on the node,
   then group and node name. The result names the node and GPU ids.
Free figures are read per GPU from the scheduler cache, so GPUs shared by
overlapping groups are never counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .cluster_state import GPU_MILLI, ClusterState
from .device_budget import first_per_root
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


def choose_group(state: ClusterState, grouping: Grouping, ask: GroupAsk, fits: np.ndarray | None = None,
                 allowed: np.ndarray | None = None) -> GroupChoice:
    """Best-fit group placement for one container (see the module
    docstring). `fits` (per row) are the nodes that fit the pod but for its
    GPUs, `allowed` (rows × device columns) the GPUs quota and permissions
    leave it; None restricts nothing."""
    groups = grouping.matching(ask.container)
    if not groups:
        return GroupChoice(False, f"no group of tenant {grouping.tenant} matches {ask.container or 'the pod'}")
    wanted = 1 if ask.share else ask.count  # devices on one node
    unit = ask.milli if ask.share else 1
    best: tuple | None = None
    typed = unfit = False
    for group in groups:
        usable = _usable(state, group, ask, allowed)
        typed |= bool(usable)
        per_node: dict[tuple[str, str], list[tuple[int, str, int]]] = {}
        for node, col, model, free in usable:  # one container's GPUs: one node, one model
            per_node.setdefault((node, model), []).append((col, model, free))
        total = sum(free if ask.share else 1 for *_, free in usable)
        for (node, _), devices in sorted(per_node.items()):
            if not ask.share:  # whole GPUs for one container: never two of one physical GPU
                devices = _one_per_root(state, state.rows[node], devices)
            if len(devices) < wanted:
                continue
            if fits is not None and not fits[state.rows[node]]:
                unfit = True  # the GPUs are there, the node's CPU or memory is not
                continue
            picked = _pick(devices, ask)
            node_free = sum(free if ask.share else 1 for *_, free in devices)
            key = (total - unit * wanted, node_free - unit * wanted, group.name, node)
            if best is None or key < best[0]:
                best = (key, group.name, node, picked)
    if best is None:
        if not typed:
            return GroupChoice(False, "no group holds a usable GPU of the requested type")
        if unfit:
            return GroupChoice(False, f"no group has {ask.count} free GPU(s) on a node that fits the pod's "
                                      "CPU and memory")
        return GroupChoice(False, f"no group has {ask.count} free GPU(s) on one node")
    (leftover, *_), name, node, picked = best
    r = state.rows[node]
    return GroupChoice(True, group=name, node=node, gpus=tuple(state.gpu_id(r, col) for col, _ in picked),
                       model=picked[0][1], leftover=leftover)


def group_devices(state: ClusterState, group: Group) -> Iterator[tuple[str, int, int]]:
    """(node, row, device column) of the group's healthy GPUs on nodes taking pods."""
    for node in group.nodes:
        r = state.rows.get(node)
        if r is None or not state.schedulable[r]:
            continue
        ids = group.on_node(node)
        for col, gpu in enumerate(state.specs[r].gpu_ids):
            if gpu in ids and state.gpu_valid[r, col]:
                yield node, r, col


def _usable(state: ClusterState, group: Group, ask: GroupAsk,
            allowed: np.ndarray | None) -> list[tuple[str, int, str, int]]:
    """(node, device column, model, milli free) of the group's GPUs this
    ask may use and that have room for it."""
    out = []
    for node, r, col in group_devices(state, group):
        if allowed is not None and not allowed[r, col]:
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


def _one_per_root(state: ClusterState, r: int, devices: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    keep = set(first_per_root(sorted(col for col, _, _ in devices), state.gpu_root[r]))
    return [d for d in devices if d[0] in keep]


def _pick(devices: list[tuple[int, str, int]], ask: GroupAsk) -> list[tuple[int, str]]:
    if ask.share:  # pack shares: the device with the least room that fits
        col, model, _ = min(devices, key=lambda d: (d[2], d[0]))
        return [(col, model)]
    return [(col, model) for col, model, _ in sorted(devices)[:ask.count]]


def groups_mask(state: ClusterState, groups: list[Group]) -> np.ndarray:
    """(rows × device columns) mask of the GPUs of `groups`."""
    mask = np.zeros((state.size, state.gpu_cols), dtype=bool)
    for group in groups:
        for node, gpu in group.gpus:
            r = state.rows.get(node)
            if r is not None and gpu in state.specs[r].gpu_ids:
                mask[r, state.specs[r].gpu_ids.index(gpu)] = True
    return mask


def group_mask(state: ClusterState, choice: GroupChoice) -> np.ndarray:
    """(rows × device columns) mask allowing only the chosen GPUs, to pass
    as `decide(..., allowed=...)` so CPUs/NUMA are chosen on that node."""
    mask = np.zeros((state.size, state.gpu_cols), dtype=bool)
    if choice.ok:
        r = state.rows[choice.node]
        for col, gpu in enumerate(state.specs[r].gpu_ids):
            mask[r, col] = gpu in choice.gpus
    return mask
