"""What each tenant holds, for `tenant.usage` (pure): the quota usage rule
is `tenancy.tenant_usage` (as the cache's `TenantLedger` keeps it), the
groups are the tenant's current grouping (§B), and a group's free GPUs are
those with nothing held on them, on a node that takes pods — the GPUs a
whole-GPU pod of the group could get."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from tidal_schemas import TenantUsage

from .cache import ClusterCache
from .cluster_arrays import GPU_MILLI
from .cluster_state import ClusterState
from .gpu_groups import Group
from .group_placement import group_devices


def free_whole_gpus(state: ClusterState, group: Group) -> int:
    """How many of the group's GPUs are wholly free on schedulable nodes."""
    return sum(1 for _, r, col in group_devices(state, group) if state.gpu_free[r, col] >= GPU_MILLI)


def tenant_reports(cache: ClusterCache, at: datetime) -> Iterator[TenantUsage]:
    """One `TenantUsage` per configured (not deleted) tenant of the cluster."""
    configured = sorted((name, config) for name, config in cache.tenants.items() if not config.deleted)
    if not configured:
        return  # asking for the usage would start the cache's ledger for nobody
    usage = cache.tenant_usage()
    for name, config in configured:
        grouping = cache.groups.get(name)
        groups = {g.name: free_whole_gpus(cache.state, g) for g in grouping.groups} if grouping else {}
        yield TenantUsage(tenant=name, held=usage.get(name, {}), quota=dict(config.quota), groups_free=groups,
                          measured_at=at)


def same_usage(a: TenantUsage | None, b: TenantUsage) -> bool:
    """Whether `b` says nothing new after `a` (the time aside)."""
    return a is not None and (a.held, a.quota, a.groups_free) == (b.held, b.quota, b.groups_free)
