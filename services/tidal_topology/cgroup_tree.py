"""The node agent's seam to the machine's pod cgroups: what its CPU
authority and its actions ask of them. `cgroups.CgroupFs` answers from the
cgroup filesystem; a simulated machine answers from a tree it keeps in
memory (`tidal_simulator.cgroup_tree`), so the agent's own code runs on
both."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .cgroups import Outcome, PodCpuset


class CgroupTree(Protocol):
    # True when the calls wait on a filesystem: the agent makes them in a
    # worker thread so its event loop keeps going.
    blocking: bool

    def scan_pod_cpusets(self) -> dict[str, PodCpuset]:
        """Every pod cgroup: uid -> its cpuset and container cgroups."""

    def set_pod_cpuset(self, uid: str, cpus: Iterable[int], mems: Iterable[int] | None = None) -> Outcome:
        """Pin pod `uid` and its containers to `cpus` (and `mems` when given)."""

    def freeze_pod(self, uid: str) -> Outcome:
        """Freeze every process of pod `uid`."""

    def thaw_pod(self, uid: str) -> Outcome:
        """Thaw pod `uid`."""

    def pod_frozen(self, uid: str) -> bool | None:
        """Whether pod `uid` is frozen; None when it cannot be told."""

    def pod_cpuset(self, uid: str) -> list[int] | None:
        """The CPUs pod `uid` is pinned to; None when it cannot be told."""
