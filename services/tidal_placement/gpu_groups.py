"""§B tenant GPU resource groups: named sets of (node, GPU) bindings.

- Only GPUs the tenant is permitted count (`TenantConfig.permissions`: an
  empty node / GPU list means no restriction); a bound GPU must be a GPU of
  that node. Anything else is dropped, with the reason kept.
- Manual groups come from `TenantConfig.groups`. Automatic groups split the
  permitted GPUs by model (`by_model`) and/or physical-vs-virtual
  (`by_kind`); with `gpus_per_container = d`, nodes with fewer than d such
  GPUs are left out (a container's GPUs must share a node).
- Groups may overlap. They never hold accounting: free / used figures come
  from the scheduler cache per GPU, so a shared GPU is counted once.
- A tenant's new configuration replaces its previous grouping.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidal_schemas import Gpu, TenantConfig
from tidal_schemas.pod import TenantPermissions

from .kept import KeptGpu

Inventory = Mapping[str, Sequence[Gpu | KeptGpu]]  # what grouping reads of a GPU: id, model, kind, healthy
"""node name → its GPUs, from the nodes' `NodeTopology`."""


@dataclass(frozen=True)
class Group:
    """A named set of (node, GPU id) bindings."""

    name: str
    gpus: frozenset[tuple[str, str]]
    container_id: str | None = None

    def on_node(self, node: str) -> set[str]:
        """The group's GPU ids on `node`."""
        return {gpu for n, gpu in self.gpus if n == node}

    @property
    def nodes(self) -> list[str]:
        return sorted({n for n, _ in self.gpus})


@dataclass(frozen=True)
class Grouping:
    """A tenant's groups, plus what was dropped from its config."""

    tenant: str
    groups: tuple[Group, ...]
    dropped: tuple[str, ...] = ()

    def matching(self, container: str | None) -> list[Group]:
        """The groups a pod naming `container` (a group name or a group's
        `container_id`; None: any) may use."""
        return [g for g in self.groups if container is None or container in (g.name, g.container_id)]


def permits(permissions: TenantPermissions, node: str, gpu: str | None = None) -> bool:
    """Whether the tenant may use `node` (and the GPU with id `gpu` there):
    the permission rule, for groups and for every placement. An empty list
    restricts nothing."""
    return (not permissions.nodes or node in permissions.nodes) and (
        gpu is None or not permissions.gpus or gpu in permissions.gpus)


def permitted_gpus(config: TenantConfig, inventory: Inventory) -> dict[str, list[Gpu]]:
    """The GPUs, per node, the tenant may group (healthy ones only)."""
    out: dict[str, list[Gpu]] = {}
    for node in sorted(inventory):
        usable = [g for g in inventory[node] if g.healthy and permits(config.permissions, node, g.id)]
        if usable:
            out[node] = usable
    return out


def build_grouping(config: TenantConfig, inventory: Inventory) -> Grouping:
    """The tenant's groups from its configuration (manual or automatic)."""
    allowed = permitted_gpus(config, inventory)
    if config.auto_grouping is not None:
        groups, dropped = _auto_groups(allowed, config.auto_grouping.by_model, config.auto_grouping.by_kind,
                                       config.auto_grouping.gpus_per_container), []
    else:
        groups, dropped = _manual_groups(config, inventory, allowed)
    return Grouping(config.tenant, tuple(groups), tuple(dropped))


def _manual_groups(config: TenantConfig, inventory: Inventory,
                   allowed: Mapping[str, Sequence[Gpu]]) -> tuple[list[Group], list[str]]:
    groups, dropped = [], []
    for spec in config.groups:
        bound: set[tuple[str, str]] = set()
        for binding in spec.bindings:
            known = {g.id for g in inventory.get(binding.node, ())}
            ok = {g.id for g in allowed.get(binding.node, ())}
            for gpu in binding.gpus:
                if gpu not in known:
                    dropped.append(f"{spec.name}: {binding.node}/{gpu} is not a GPU of that node")
                elif gpu not in ok:
                    dropped.append(f"{spec.name}: {binding.node}/{gpu} is not permitted")
                else:
                    bound.add((binding.node, gpu))
        if bound:
            groups.append(Group(spec.name, frozenset(bound), spec.container_id))
        else:
            dropped.append(f"{spec.name}: no permitted GPU left, group dropped")
    return groups, dropped


def _auto_groups(allowed: Mapping[str, Sequence[Gpu]], by_model: bool, by_kind: bool,
                 per_container: int | None) -> list[Group]:
    buckets: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for node, gpus in allowed.items():
        for gpu in gpus:
            key = (gpu.model if by_model else "any", gpu.kind if by_kind else "any")
            buckets[key][node].append(gpu.id)
    groups = []
    for (model, kind), per_node in sorted(buckets.items()):
        bound = {(node, gpu) for node, ids in per_node.items()
                 if not per_container or len(ids) >= per_container for gpu in ids}
        if bound:
            name = "auto-" + "-".join(p for p in (model, kind, f"x{per_container}" if per_container else "") if p)
            groups.append(Group(name, frozenset(bound)))
    return groups


class GroupRegistry:
    """Every tenant's current grouping; a new config replaces the old one."""

    def __init__(self) -> None:
        self._by_tenant: dict[str, Grouping] = {}

    def apply(self, config: TenantConfig, inventory: Inventory) -> Grouping:
        """Build and store the tenant's grouping (replacing any previous one)."""
        grouping = build_grouping(config, inventory)
        self._by_tenant[config.tenant] = grouping
        return grouping

    def get(self, tenant: str) -> Grouping | None:
        """The tenant's grouping, if it configured one."""
        return self._by_tenant.get(tenant)

    def forget(self, tenant: str) -> None:
        """Drop a tenant's grouping."""
        self._by_tenant.pop(tenant, None)
