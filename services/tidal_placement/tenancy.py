"""Tenant rules placement applies before choosing a node (§B), pure.

- Permissions hold on every path: `permissions.nodes` limits the nodes of
  every pod (CPU-only ones too), `permissions.gpus` the GPU ids (the rule
  is `gpu_groups.permits`). Groups hold only permitted GPUs, and what a
  group choice allows is intersected with the permissions all the same. A
  tenant whose groups were all dropped places like a tenant without groups:
  on its permitted GPUs.
- Quota: a limit per resource type, "cpu" (milli-CPU), "memory" (MiB), a
  GPU model or the generic "gpu" (milli-GPU of all models together);
  `can_take = limit − allocated`, a type without a limit is unlimited. A
  GPU pod may use the models, among those it asks for (any when it names
  none), whose quota has room for it: the others are masked out, the pod
  is refused only when no model is left.
- A refusal ("quota: …", "permission: …") holds until the tenant's
  configuration or holdings change, not until room frees up: it is its own
  outcome (`Allowance.refused`), and the queue does not make such a pod
  wait for room nor hold other pods back behind it (§C). A group without
  room for the pod is a lack of room, like a full node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from tidal_schemas import GPU_TYPE, TenantConfig
from tidal_schemas.pod import TenantPermissions

from .cluster_state import ClusterState
from .decide import eligible_gpus, node_fit
from .gpu_groups import Grouping, permits
from .kept import PodLike
from .group_placement import GroupAsk, choose_group, group_mask, groups_mask
from .pod_request import PodRequest


def can_take(limit: int, allocated: int) -> int:
    """How much more of a resource type the tenant may get (never below 0)."""
    return max(limit - allocated, 0)


def charge(held: dict[str, int], pod: PodLike, gpus: Iterable[tuple[str, int]]) -> None:
    """Add what `pod` holds to its tenant's usage `held`: "cpu" in milli-CPU,
    "memory" in MiB, and each (model, milli) GPU under its model and under
    the generic "gpu" (once when the model is unknown, "")."""
    held["cpu"] = held.get("cpu", 0) + pod.requests.cpu_milli
    held["memory"] = held.get("memory", 0) + pod.requests.memory_mib
    for model, milli in gpus:
        for kind in {model or GPU_TYPE, GPU_TYPE}:
            held[kind] = held.get(kind, 0) + milli


def tenant_usage(holdings: Iterable[tuple[PodLike, Mapping[str, int]]],
                 gpu_model: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Per tenant, what its placed pods hold (see `charge`). `holdings`
    pairs a pod with its milli-GPU per GPU id, `gpu_model` names the model
    of a GPU id."""
    usage: dict[str, dict[str, int]] = {}
    for pod, gpus in holdings:
        charge(usage.setdefault(pod.tenant, {}), pod,
               ((gpu_model.get(gpu, ""), milli) for gpu, milli in gpus.items()))
    return usage


@dataclass(frozen=True)
class Allowance:
    """Where a pod may go under its tenant's rules: the rows (`nodes`) and
    GPU devices (`gpus`, rows × device columns) it may use, None meaning no
    restriction — or why it cannot be placed now (`reason`), with `refused`
    when that is a quota or permission refusal rather than a lack of room."""

    nodes: np.ndarray | None = None
    gpus: np.ndarray | None = None
    reason: str = ""
    refused: bool = False


def _refused(reason: str) -> Allowance:
    return Allowance(reason=reason, refused=True)


def allowance(state: ClusterState, pod: PodLike, config: TenantConfig | None,
              grouping: Grouping | None, held: Mapping[str, int]) -> Allowance:
    """Apply the module's rules to `pod` of a tenant holding `held`: its
    permitted nodes and GPUs, narrowed to the GPU models with quota room
    and, with groups, to the GPUs of the best-fit group (§B) whose node fits
    the whole pod."""
    if config is None:
        return Allowance()
    problem = _cpu_memory_quota(pod, config.quota, held)
    if problem:
        return _refused(problem)
    nodes, permitted = _permission_masks(state, config.permissions)
    if nodes is not None and not nodes.any():
        return _refused(f"permission: none of the nodes tenant {pod.tenant} may use "
                       f"({', '.join(config.permissions.nodes)}) is in the cluster")
    if not pod.gpu.count:
        return Allowance(nodes=nodes)
    request = PodRequest.from_pod(pod)
    groups = grouping.matching(pod.gpu.group) if grouping is not None and grouping.groups else None
    if groups == []:
        return _refused(f"permission: no group of tenant {pod.tenant} matches {pod.gpu.group}")
    if groups is not None:
        in_groups = groups_mask(state, groups)
        permitted = in_groups if permitted is None else permitted & in_groups
    if permitted is None and not config.quota:
        return Allowance(nodes=nodes)
    typed = eligible_gpus(state, request)  # the GPUs the pod asks for, wherever they are
    if permitted is not None and typed.any() and not (typed & permitted).any():
        return _refused(f"permission: tenant {pod.tenant} may use no GPU the pod asks for")
    problem, room = _gpu_quota(state, pod, config.quota, held, typed if permitted is None else typed & permitted)
    if problem:
        return _refused(problem)
    gpus = permitted
    if room is not None:
        gpus = room if gpus is None else gpus & room
    if groups is None:
        return Allowance(nodes=nodes, gpus=gpus)
    ask = GroupAsk(pod.gpu.count, pod.gpu.milli, tuple(pod.gpu.models), pod.gpu.kind, pod.gpu.group)
    choice = choose_group(state, grouping, ask, fits=node_fit(state, request, nodes), allowed=gpus)
    return Allowance(nodes=nodes, gpus=group_mask(state, choice)) if choice.ok else Allowance(reason=choice.reason)


def _cpu_memory_quota(pod: PodLike, quota: Mapping[str, int], held: Mapping[str, int]) -> str | None:
    for kind, need in (("cpu", pod.requests.cpu_milli), ("memory", pod.requests.memory_mib)):
        if kind in quota and need > can_take(quota[kind], held.get(kind, 0)):
            return f"quota: tenant {pod.tenant} {kind} {held.get(kind, 0)} + {need} > limit {quota[kind]}"
    return None


def _gpu_quota(state: ClusterState, pod: PodLike, quota: Mapping[str, int], held: Mapping[str, int],
               candidates: np.ndarray) -> tuple[str | None, np.ndarray | None]:
    """Why the GPU quota refuses the pod, or the devices of the models with
    room (None: every model has room). `candidates` are the GPUs the pod
    could use but for quota; they name the models reported when it has none."""
    need = pod.gpu.total_milli
    if GPU_TYPE in quota and need > can_take(quota[GPU_TYPE], held.get(GPU_TYPE, 0)):
        return (f"quota: tenant {pod.tenant} {GPU_TYPE} {held.get(GPU_TYPE, 0)} + {need} > limit "
                f"{quota[GPU_TYPE]}"), None
    full = [state.model_ids[m] for m in state.models if m in quota and need > can_take(quota[m], held.get(m, 0))]
    if not full:
        return None, None
    n = state.size
    room = ~np.isin(state.gpu_dev_model[:n], full)
    if candidates.any() and not (candidates & room).any():
        models = sorted({state.models[i] for i in np.unique(state.gpu_dev_model[:n][candidates])})
        return f"quota: tenant {pod.tenant} has no room for {need} milli-GPU of {'/'.join(models)}", None
    return None, room


def _permission_masks(state: ClusterState,
                      permissions: TenantPermissions) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The rows and the (rows × device columns) GPUs `permissions` leave;
    None where they restrict nothing."""
    if not permissions.nodes and not permissions.gpus:
        return None, None
    rows = np.zeros(state.size, dtype=bool)
    devices = np.zeros((state.size, state.gpu_cols), dtype=bool)
    for node in permissions.nodes or list(state.rows):  # the named nodes, else every node
        r = state.rows.get(node)
        if r is None or not permits(permissions, node):
            continue
        rows[r] = True
        for col, gpu in enumerate(state.specs[r].gpu_ids):
            devices[r, col] = permits(permissions, node, gpu)
    return (rows if permissions.nodes else None), devices
