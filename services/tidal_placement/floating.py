"""Where a node's floating devices are counted (see `cluster_state`): pods
that hold GPUs or exclusive CPUs Tidal cannot name are charged on devices
chosen from the node's named holdings alone, so the cache does not depend on
the order holdings arrived in."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .allocation import Floating
from .cluster_arrays import GPU_MILLI
from .device_budget import device_free


def place_floating(floats: Sequence[Floating], gpu_used: np.ndarray, gpu_valid: np.ndarray, gpu_root: np.ndarray,
                   gpu_weight: np.ndarray, numa_alloc: np.ndarray, numa_used: np.ndarray) -> list[tuple[str, int, int]]:
    """Charge `floats` (in order) on one node's row arrays, in place; the
    charges made, as ("gpu" | "numa", column, amount). GPUs from the highest
    index down (whole ones on fully free physical GPUs, a slice only when
    none is free; shares on the fullest GPU with room), exclusive CPUs from
    the NUMA nodes with most free. What fits nowhere is still charged (on the
    freest device), so it is never handed out."""
    charges: list[tuple[str, int, int]] = []
    physical = (gpu_root < 0) | (gpu_root == np.arange(len(gpu_root)))
    for floating in floats:
        for need in sorted(floating.gpus, reverse=True):
            room = device_free(gpu_used, gpu_valid, gpu_root, gpu_weight)
            free = [(int(room[k]) if gpu_valid[k] else -1, k) for k in range(len(gpu_used))]
            if not free:
                break
            fits = [(f, k) for f, k in free if f >= need]
            _, k = max(fits, key=lambda fk: (bool(physical[fk[1]]), fk[1]) if need >= GPU_MILLI
                       else (-fk[0], fk[1])) if fits else max(free)
            gpu_used[k] += need
            charges.append(("gpu", k, need))
        left = floating.exclusive_cpus
        while left > 0 and len(numa_alloc):
            free_numa = (numa_alloc - numa_used).tolist()
            j = max(range(len(free_numa)), key=lambda c: (free_numa[c], -c))
            take = min(left, free_numa[j]) if free_numa[j] > 0 else left
            numa_used[j] += take
            charges.append(("numa", j, take))
            left -= take
    return charges
