"""A simulated machine's pod cgroups, in memory: what the node agent's code
reads and writes (`tidal_topology.cgroup_tree.CgroupTree`) where a real
machine has its cgroup filesystem.

The simulated kubelet creates a pod's cgroup when it starts the pod (its
cpuset inherited from the kubepods parent: every CPU of the node) and
removes it when the pod is deleted; the node agent pins and freezes it.
Like the kernel, a write to a pod that has no cgroup finds nothing, and an
empty cpuset is refused. Every write is counted, and the latest are kept
(`writes`), so a run shows what the agent did to the machine.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from tidal_topology import Outcome, PodCpuset
from tidal_topology import format_cpuset

KEPT_WRITES = 10_000


@dataclass
class PodCgroup:
    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    containers: frozenset[str] = frozenset({"main"})
    frozen: bool = False


@dataclass
class MemoryCgroups:
    """One machine's pod cgroups (uid -> cgroup); see the module docstring."""

    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    pods: dict[str, PodCgroup] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)
    writes: deque = field(default_factory=lambda: deque(maxlen=KEPT_WRITES))
    blocking = False  # nothing waits on a filesystem: the agent calls in its own loop

    # -- the kubelet's part ------------------------------------------------------
    def create_pod(self, uid: str) -> None:
        self.pods.setdefault(uid, PodCgroup(self.cpus, self.mems))

    def remove_pod(self, uid: str) -> None:
        self.pods.pop(uid, None)

    # -- the agent's seam ---------------------------------------------------------
    def scan_pod_cpusets(self) -> dict[str, PodCpuset]:
        return {uid: PodCpuset(pod.cpus, pod.containers) for uid, pod in self.pods.items()}

    def set_pod_cpuset(self, uid: str, cpus: Iterable[int], mems: Iterable[int] | None = None) -> Outcome:
        pod = self.pods.get(uid)
        wanted = tuple(sorted(set(cpus)))
        if not wanted or (mems is not None and not list(mems)):
            return Outcome("refused", "a cpuset needs at least one cpu (and one memory node when mems are given)")
        if pod is None:
            return Outcome("unknown-pod", f"no cgroup for pod {uid}")
        unknown = set(wanted) - set(self.cpus)
        if unknown:  # the kernel's EINVAL: a CPU the machine does not have
            return Outcome("failed", f"cpuset.cpus: cpus {format_cpuset(unknown)} are not on this machine")
        pod.cpus = wanted
        if mems is not None:
            pod.mems = tuple(sorted(set(mems)))
        self._wrote("cpuset", uid, format_cpuset(wanted))
        return Outcome("done", f"cpus {format_cpuset(wanted)}")

    def freeze_pod(self, uid: str) -> Outcome:
        return self._set_frozen(uid, True)

    def thaw_pod(self, uid: str) -> Outcome:
        return self._set_frozen(uid, False)

    def pod_frozen(self, uid: str) -> bool | None:
        pod = self.pods.get(uid)
        return None if pod is None else pod.frozen

    def pod_cpuset(self, uid: str) -> list[int] | None:
        pod = self.pods.get(uid)
        return None if pod is None else list(pod.cpus)

    # -- internals ----------------------------------------------------------------
    def _set_frozen(self, uid: str, frozen: bool) -> Outcome:
        pod, verb = self.pods.get(uid), "frozen" if frozen else "thawed"
        if pod is None:
            return Outcome("unknown-pod", f"no cgroup for pod {uid}")
        if pod.frozen == frozen:
            return Outcome("done", f"already {verb}")
        pod.frozen = frozen
        self._wrote("freeze" if frozen else "thaw", uid, verb)
        return Outcome("done", verb)

    def _wrote(self, kind: str, uid: str, value: str) -> None:
        self.counts[kind] += 1
        self.writes.append((kind, uid, value))
