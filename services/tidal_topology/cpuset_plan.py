"""Which cpuset every pod cgroup on the node should have, from the books
alone (pure) — kubelet's static CPU manager policy at pod level, plus the
NUMA nodes placement chose:

    exclusive pod p:             cpus(p) = its assigned CPUs
    pod pinned to NUMA nodes N:  cpus(p) = shared ∩ cpus(N), or shared when that is empty
    any other pod:               cpus(p) = shared = all CPUs − ∪ assigned

Memory nodes follow a pinning: mems(p) = the NUMA nodes of its exclusive
CPUs, or N, that are memory nodes of the machine (a NUMA override may
declare ones that are not); every memory node for a pod in the whole
shared pool, or when none of those is one. When `manage_all` is off (the
node offers no exclusive CPUs, so kubelet may own the cpusets), only pods
the books name are pinned; the others are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .checkpoint import CpuState


@dataclass(frozen=True)
class Pinning:
    """A pod cgroup's expected cpuset and memory nodes, and which pod of the
    books it is ('' for a pod the books do not name)."""

    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    pod: str = ""


def pods_by_uid(state: CpuState) -> dict[str, str]:
    """uid -> pod key of every claim whose uid is known."""
    return {claim.uid: key for key, claim in state.claims.items() if claim.uid}


def _mems(numas: Iterable[int], memory_nodes: frozenset[int]) -> tuple[int, ...]:
    real = sorted(set(numas) & memory_nodes)
    return tuple(real) if real else tuple(sorted(memory_nodes))


def pinning_of(state: CpuState, key: str, numa_of: Mapping[int, int], memory_nodes: frozenset[int]) -> Pinning:
    """The expected pinning of pod `key` (see the module docstring)."""
    held, claim = state.held_by(key), state.claims.get(key)
    if held:
        return Pinning(tuple(sorted(held)), _mems({numa_of[c] for c in held if c in numa_of}, memory_nodes), key)
    if claim is not None and claim.numa_nodes:
        there = sorted(c for c in state.shared_pool if numa_of.get(c) in claim.numa_nodes)
        if there:
            return Pinning(tuple(there), _mems(claim.numa_nodes, memory_nodes), key)
    return Pinning(tuple(sorted(state.shared_pool)), tuple(sorted(memory_nodes)), key)


def expected_cpusets(state: CpuState, uids: Iterable[str], numa_of: Mapping[int, int],
                     memory_nodes: frozenset[int], manage_all: bool) -> dict[str, Pinning]:
    """uid -> expected pinning of each pod cgroup in `uids` the agent manages."""
    named = pods_by_uid(state)
    expected = {}
    for uid in uids:
        key = named.get(uid)
        if key is not None:
            expected[uid] = pinning_of(state, key, numa_of, memory_nodes)
        elif manage_all:
            expected[uid] = Pinning(tuple(sorted(state.shared_pool)), tuple(sorted(memory_nodes)))
    return expected
