"""A physical GPU and its slices (MIG instances, vGPUs) are one budget (pure).

Every device has its own 1000 milli. A slice k of physical GPU p stands for
w(k) milli of p — w(k) = 1000 · memory(k) / memory(p) when both are known,
else 1000 / (slices of p) — so, with used(d) the milli held on device d:

    load(p) = used(p) + Σ_k ⌈w(k) · used(k) / 1000⌉
    free(p) = 1000 − load(p)
    free(k) = min(1000 − used(k), ⌊free(p) · 1000 / w(k)⌋)

all clamped at 0, and 0 for a device that is unhealthy or whose physical
GPU is. A whole physical GPU is therefore never given while any slice of it
is held, and slices never take more than their parent has left. A device's
*root* is its physical GPU (itself for a physical GPU, or for a slice whose
parent is not reported); devices with the same root are never given to one
pod together (`distinct_roots`, `one_per_root`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from tidal_schemas.common import GPU_MILLI


def roots_and_weights(ids: Sequence[str], parents: Sequence[str | None],
                      memory_mib: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per device (in `ids` order): the column of its root and its weight w."""
    col = {gpu: j for j, gpu in enumerate(ids)}
    roots = tuple(col.get(parent, j) if parent else j for j, parent in enumerate(parents))
    slices = [sum(1 for k, r in enumerate(roots) if r == j and k != j) for j in range(len(ids))]
    weights = []
    for j, root in enumerate(roots):
        if root == j:
            weights.append(GPU_MILLI)
        elif memory_mib[j] and memory_mib[root]:
            weights.append(min(max(-(-GPU_MILLI * memory_mib[j] // memory_mib[root]), 1), GPU_MILLI))
        else:
            weights.append(-(-GPU_MILLI // slices[root]))
    return roots, tuple(weights)


def device_free(used: np.ndarray, valid: np.ndarray, root: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """free(d) of every device of one node (see the module docstring);
    `root` < 0 marks padding, which is its own root."""
    cols = np.arange(len(used))
    root = np.where(root < 0, cols, root)
    is_slice = root != cols
    if not is_slice.any():  # no slices: each device is its own budget (the common node, once per decision)
        return np.where(valid, np.maximum(GPU_MILLI - used, 0), 0)
    load = np.where(is_slice, 0, used)
    np.add.at(load, root[is_slice], -(-weight[is_slice] * used[is_slice] // GPU_MILLI))
    left = GPU_MILLI - load[root]
    free = np.where(is_slice, np.minimum(GPU_MILLI - used, left * GPU_MILLI // np.maximum(weight, 1)), left)
    return np.where(valid & valid[root], np.maximum(free, 0), 0)


def node_gpu_figures(used: np.ndarray, valid: np.ndarray, root: np.ndarray, weight: np.ndarray, *,
                     sliced: bool | None = None) -> tuple[np.ndarray | list[int], int, int, int]:
    """One node's free(d) per device and its summaries: idle milli (Σ over
    physical GPUs: a slice's milli is its parent's), whole GPUs (physical
    GPUs with a fully free device) and the most milli one device has.
    `sliced`: whether some device is a slice of another, when the caller
    knows (None: read from `root`)."""
    if sliced is None:
        sliced = any(r >= 0 and r != j for j, r in enumerate(root.tolist()))
    if not sliced:
        return unsliced_gpu_figures(used, valid)
    free = device_free(used, valid, root, weight)
    is_root = (root < 0) | (root == np.arange(free.size))
    idle, whole = int(free[is_root].sum()), int(distinct_roots((free == GPU_MILLI)[None, :], root[None, :])[0])
    return free, idle, whole, int(free.max()) if free.size else 0


def unsliced_gpu_figures(used: np.ndarray, valid: np.ndarray) -> tuple[list[int], int, int, int]:
    """`node_gpu_figures` of a node without slices, where a device is a
    physical GPU (free per device as a list). Plain Python: numpy's per-call
    cost was most of the work on a node's few devices, once per decision."""
    free = [max(GPU_MILLI - u, 0) if ok else 0 for u, ok in zip(used.tolist(), valid.tolist())]
    return free, sum(free), free.count(GPU_MILLI), max(free, default=0)


def distinct_roots(mask: np.ndarray, root: np.ndarray) -> np.ndarray:
    """Per row of (rows × devices) `mask`: how many physical GPUs have at
    least one device in it — the most devices one pod can take together."""
    if ((root < 0) | (root == np.arange(mask.shape[1]))).all():  # every device its own physical GPU
        return np.count_nonzero(mask, axis=1)
    rows, cols = np.nonzero(mask)
    roots = np.where(root[rows, cols] < 0, cols, root[rows, cols])
    seen = np.zeros(mask.shape, dtype=bool)
    seen[rows, roots] = True
    return np.count_nonzero(seen, axis=1)


def first_per_root(candidates: Iterable[int], root: np.ndarray) -> list[int]:
    """`candidates` (device columns, in preference order), keeping only the
    first of each physical GPU."""
    picked, taken, roots = [], set(), root.tolist()
    for col in (candidates.tolist() if isinstance(candidates, np.ndarray) else candidates):
        r = roots[col] if roots[col] >= 0 else col
        if r not in taken:
            taken.add(r)
            picked.append(int(col))
    return picked


def one_per_root(candidates: Iterable[int], root: np.ndarray, count: int) -> list[int]:
    """The first `count` of `candidates` with no two on one physical GPU;
    [] when there are too few."""
    picked = first_per_root(candidates, root)
    return picked[:count] if len(picked) >= count else []
