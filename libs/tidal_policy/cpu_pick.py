"""§A physical CPU choice on a node: the kubelet static CPU manager's packed
allocator, and placement's per-NUMA policies (`cpu_distribution`) made
into CPU ids with it.

`packed` is a port of `takeByTopologyNUMAPacked` (kubernetes
`pkg/kubelet/cm/cpumanager/cpu_assignment.go`) and must give the same CPUs:

1. fail when fewer CPUs are available than requested;
2. outer unit = NUMA node when sockets >= NUMA nodes (a NUMA node holds whole
   sockets), socket otherwise (NUMA nodes inside a socket); inner = the other;
3. take whole free outer units, then whole free inner units, then whole free
   cores, then single threads — a unit only while the remaining need is at
   least its size;
4. every phase walks candidates with the fewest available CPUs first, ties to
   the lower id, nested outer -> inner -> core -> thread.

Cores are keyed by (socket, core) so a topology whose core ids restart per
socket (raw sysfs `core_id`) still works; with machine-unique core ids, as
kubelet uses, this is the same thing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .cpu_distribution import CPU_POLICIES, distribute, spread_shares

# kubelet's own, then the per-NUMA policies a pod asks for
POLICIES: tuple[str, ...] = ("packed", *CPU_POLICIES)


class CpuLike(Protocol):
    cpu: int
    core: int
    socket: int
    numa: int


@dataclass(frozen=True)
class PickResult:
    """The CPUs chosen (ascending), or None with the reason it is impossible."""

    cpus: list[int] | None
    reason: str

    @property
    def ok(self) -> bool:
        return self.cpus is not None


class _Topology:
    """Index of the whole machine; never changes while picking."""

    def __init__(self, cpus: Iterable[CpuLike]):
        self.socket_of: dict[int, int] = {}
        self.numa_of: dict[int, int] = {}
        self.core_of: dict[int, tuple[int, int]] = {}
        for c in cpus:
            if c.cpu in self.socket_of:
                raise ValueError(f"cpu {c.cpu} appears twice in the topology")
            self.socket_of[c.cpu], self.numa_of[c.cpu] = c.socket, c.numa
            self.core_of[c.cpu] = (c.socket, c.core)
        if not self.socket_of:
            raise ValueError("the topology lists no CPU")
        n_cpus = len(self.socket_of)
        self.cpus_per_core = n_cpus // len(set(self.core_of.values()))
        self.cpus_per_socket = n_cpus // len(set(self.socket_of.values()))
        self.numa_size = Counter(self.numa_of.values())
        self.numa_first = len(set(self.socket_of.values())) >= len(self.numa_size)

    def in_numa(self, numa: int) -> set[int]:
        return {cpu for cpu, n in self.numa_of.items() if n == numa}

    def in_socket(self, socket: int) -> set[int]:
        return {cpu for cpu, s in self.socket_of.items() if s == socket}

    def in_core(self, core: tuple[int, int]) -> set[int]:
        return {cpu for cpu, k in self.core_of.items() if k == core}


def _core_key(core: tuple[int, int]) -> tuple[int, int]:
    # kubelet compares core ids; the socket only breaks ties between equal ids.
    return core[1], core[0]


class _Accumulator:
    """Mirror of kubelet's cpuAccumulator: `free` is its `details`."""

    def __init__(self, topo: _Topology, available: Iterable[int], count: int):
        self.topo = topo
        self.free = {cpu for cpu in available if cpu in topo.socket_of}
        self.result: set[int] = set()
        self.needed = count

    def take(self, cpus: set[int]) -> None:
        self.result |= cpus
        self.free -= cpus
        self.needed -= len(cpus)

    # -- ordering -----------------------------------------------------------

    def _sorted(self, ids: Iterable, unit_of: Callable[[int], object], key=lambda i: i) -> list:
        counts = Counter(unit_of(cpu) for cpu in self.free)
        return sorted(set(ids), key=lambda i: (counts[i], key(i)))

    def _within(self, parents: list, parent_of: Callable[[int], object], child_of: Callable[[int], object],
                key=lambda i: i) -> list:
        """Children with free CPUs, parent by parent, each parent's children
        fewest-free first; a child under two parents keeps its first place."""
        out, seen = [], set()
        for parent in parents:
            children = {child_of(cpu) for cpu in self.free if parent_of(cpu) == parent}
            for child in self._sorted(children, child_of, key):
                if child not in seen:
                    seen.add(child)
                    out.append(child)
        return out

    def sorted_numas(self) -> list[int]:
        t = self.topo
        if t.numa_first:
            return self._sorted({t.numa_of[c] for c in self.free}, t.numa_of.__getitem__)
        return self._within(self.sorted_sockets(), t.socket_of.__getitem__, t.numa_of.__getitem__)

    def sorted_sockets(self) -> list[int]:
        t = self.topo
        if t.numa_first:
            return self._within(self.sorted_numas(), t.numa_of.__getitem__, t.socket_of.__getitem__)
        return self._sorted({t.socket_of[c] for c in self.free}, t.socket_of.__getitem__)

    def sorted_cores(self) -> list[tuple[int, int]]:
        t = self.topo
        if t.numa_first:
            return self._within(self.sorted_sockets(), t.socket_of.__getitem__, t.core_of.__getitem__, _core_key)
        return self._within(self.sorted_numas(), t.numa_of.__getitem__, t.core_of.__getitem__, _core_key)

    def sorted_cpus(self) -> list[int]:
        order = []
        for core in self.sorted_cores():
            order.extend(sorted(c for c in self.free if self.topo.core_of[c] == core))
        return order

    # -- phases -------------------------------------------------------------

    def _take_whole(self, units: list, members: Callable[[object], set[int]],
                    is_free: Callable[[set[int]], bool]) -> None:
        # The candidate list is fixed before taking, as in kubelet.
        for unit in [u for u in units if is_free(members(u))]:
            cpus = members(unit)
            if self.needed >= len(cpus):
                # kubelet takes the unit's every CPU; on symmetric machines they
                # are all free here, and on odd ones a busy CPU must never leak in.
                self.take(cpus & self.free)

    def take_full_numas(self) -> None:
        t = self.topo
        self._take_whole(self.sorted_numas(), t.in_numa, lambda cpus: cpus <= self.free)

    def take_full_sockets(self) -> None:
        t = self.topo
        # kubelet: "free" = as many free CPUs as an average socket / core has
        self._take_whole(self.sorted_sockets(), t.in_socket, lambda cpus: len(cpus & self.free) == t.cpus_per_socket)

    def take_full_cores(self) -> None:
        t = self.topo
        self._take_whole(self.sorted_cores(), t.in_core, lambda cpus: len(cpus & self.free) == t.cpus_per_core)

    def take_remaining(self) -> None:
        for cpu in self.sorted_cpus():
            self.take({cpu})
            if self.needed < 1:
                return


def preference_order(topology: Sequence[CpuLike], available: Iterable[int]) -> list[int]:
    """The order in which the packed allocator would take single threads from
    `available` (kubelet `sortAvailableCPUs`): core by core, cores nested in
    their outer and inner units, fewest available CPUs first, ties to lower id."""
    return _Accumulator(_Topology(topology), available, 0).sorted_cpus()


def take_packed(topology: Sequence[CpuLike], available: Iterable[int], count: int) -> PickResult:
    """`count` CPUs from `available` exactly as kubelet `takeByTopologyNUMAPacked`
    picks them (see the module docstring for the rules)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    acc = _Accumulator(_Topology(topology), available, count)
    if acc.needed < 1:
        return PickResult([], "nothing requested")
    if acc.needed > len(acc.free):
        return PickResult(None, f"not enough cpus available: requested {count}, available {len(acc.free)}")
    first, second = ((acc.take_full_numas, acc.take_full_sockets) if acc.topo.numa_first
                     else (acc.take_full_sockets, acc.take_full_numas))
    for phase in (first, second, acc.take_full_cores, acc.take_remaining):
        phase()
        if acc.needed < 1:
            return PickResult(sorted(acc.result), "packed")
    return PickResult(None, "failed to allocate cpus")


def pick_per_numa(topology: Sequence[CpuLike], available: Iterable[int], counts: Mapping[int, int]) -> PickResult:
    """For a decision that already says how many CPUs to take on each NUMA node:
    the packed choice within each NUMA node's available CPUs, united."""
    topo = _Topology(topology)
    pool = set(available)
    chosen: list[int] = []
    for numa in sorted(counts):
        want = counts[numa]
        if want < 0:
            raise ValueError(f"count for numa {numa} must be >= 0, got {want}")
        if want == 0:
            continue
        if numa not in topo.numa_size:
            return PickResult(None, f"numa {numa} is not in the topology")
        part = take_packed(topology, pool & topo.in_numa(numa), want)
        if part.cpus is None:
            return PickResult(None, f"numa {numa}: {part.reason}")
        chosen.extend(part.cpus)
    return PickResult(sorted(chosen), "per-numa " + ", ".join(f"{n}:{counts[n]}" for n in sorted(counts)))


def pick_cpus(topology: Sequence[CpuLike], available: Iterable[int], count: int,
              policy: str = "packed", numa_load: Mapping[int, float] | None = None) -> PickResult:
    """`count` exclusive CPUs from `available` under `policy`:

    - `packed`: kubelet's packed allocator over the whole node;
    - `spread`, `single-numa`, `auto`: the CPUs per NUMA node placement gives
      (`cpu_distribution.distribute` on this one node, with `numa_load` per
      NUMA id, 0 where unknown), then packed within each NUMA node.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    if policy == "packed":
        return take_packed(topology, available, count)
    if count == 0:
        return PickResult([], "nothing requested")
    topo = _Topology(topology)
    pool = {cpu for cpu in available if cpu in topo.numa_of}
    numas = sorted(topo.numa_size)
    free = Counter(topo.numa_of[cpu] for cpu in pool)
    row = np.array([[free[n] for n in numas]], dtype=np.int64)
    load = np.array([[(numa_load or {}).get(n, 0.0) for n in numas]])
    shares = distribute(policy, count, row, load, np.ones(row.shape, dtype=bool))
    if not shares.feasible[0]:
        return PickResult(None, _unmet(policy, count, numas, row[0]))
    counts = {n: int(c) for n, c in zip(numas, shares.counts[0]) if c > 0}
    result = pick_per_numa(topology, pool, counts)
    if not result.ok:
        return result
    return PickResult(result.cpus, f"{policy} " + ", ".join(f"{n}:{c}" for n, c in sorted(counts.items())))


def _unmet(policy: str, count: int, numas: list[int], free: np.ndarray) -> str:
    """Why `policy` cannot place `count` CPUs on NUMA nodes `numas` with `free` each."""
    if count > free.sum():
        return f"not enough cpus available: requested {count}, available {int(free.sum())}"
    if policy == "spread":
        share = spread_shares(count, free[None, :], np.ones((1, len(numas)), dtype=bool))[0]
        short = [f"numa {n} has {f} for its share {c}" for n, f, c in zip(numas, free, share) if f < c]
        return "cannot spread evenly: " + "; ".join(short)
    return f"no NUMA node has {count} available cpus (most on one: {int(free.max())})"
