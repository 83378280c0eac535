"""Tenant rules placement applies before choosing a node (§B): permissions,
quota, and the GPU group a pod must use (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from tidal_schemas import PodLifecycle, TenantConfig

from .cluster_state import ClusterState
from .group_placement import GroupAsk, can_take, choose_group, group_mask
from .gpu_groups import Grouping


def tenant_usage(holdings: Iterable[tuple[PodLifecycle, Mapping[str, int]]],
                 gpu_model: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Per tenant, what its placed pods hold: milli-GPU per GPU model, "cpu"
    in milli-CPU and "memory" in MiB. `holdings` pairs a pod with its GPUs."""
    usage: dict[str, dict[str, int]] = {}
    for pod, gpus in holdings:
        held = usage.setdefault(pod.tenant, {})
        held["cpu"] = held.get("cpu", 0) + pod.requests.cpu_milli
        held["memory"] = held.get("memory", 0) + pod.requests.memory_mib
        for gpu, milli in gpus.items():
            model = gpu_model.get(gpu, "gpu")
            held[model] = held.get(model, 0) + milli
    return usage


def quota_problem(pod: PodLifecycle, config: TenantConfig | None, held: Mapping[str, int]) -> str | None:
    """Why the pod would exceed its tenant's quota (`limit − allocated`), or
    None. A GPU pod passes when one of its allowed models has room."""
    if config is None or not config.quota:
        return None
    quota = config.quota
    for kind, need in (("cpu", pod.requests.cpu_milli), ("memory", pod.requests.memory_mib)):
        if kind in quota and need > can_take(quota[kind], held.get(kind, 0)):
            return f"quota: tenant {pod.tenant} {kind} {held.get(kind, 0)} + {need} > limit {quota[kind]}"
    if pod.gpu.count:
        need = pod.gpu.total_milli
        models = [m for m in (pod.gpu.models or list(quota)) if m in quota]
        if models and all(need > can_take(quota[m], held.get(m, 0)) for m in models):
            return f"quota: tenant {pod.tenant} has no room for {need} milli-GPU of {'/'.join(models)}"
    return None


def gpu_allowance(state: ClusterState, pod: PodLifecycle, config: TenantConfig | None,
                  grouping: Grouping | None, held: Mapping[str, int]) -> tuple[np.ndarray | None, str | None]:
    """The GPUs a GPU pod may use (a rows × devices mask, None = any), or why
    it cannot be placed now. With groups: the best-fit group's chosen GPUs
    (§B); otherwise the GPUs of the nodes the tenant is permitted."""
    if not pod.gpu.count:
        return None, None
    if grouping is not None and grouping.groups:
        ask = GroupAsk(pod.gpu.count, pod.gpu.milli, tuple(pod.gpu.models), pod.gpu.kind, pod.gpu.group)
        choice = choose_group(state, grouping, ask, held)
        return (group_mask(state, choice), None) if choice.ok else (None, choice.reason)
    if config is not None and config.permissions.nodes:
        mask = np.zeros((state.size, state.gpu_cols), dtype=bool)
        for node in config.permissions.nodes:
            if node in state.rows:
                mask[state.rows[node], :] = True
        return mask, None
    return None, None
