"""§E usage sampling: per-CPU utilisation, NUMA and node load, node memory,
and per-pod CPU/memory from cgroups.

Pure functions work on snapshots (two samples make a rate); the `read_*`
functions are the thin I/O that takes those snapshots from a procfs root or
a cgroup root.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tidal_clock import elapsed_ns

from .cgroup_paths import CgroupVersion, list_pod_dirs, parent_dir

# ---------------------------------------------------------------- CPU ------


@dataclass(frozen=True)
class CpuTimes:
    """One CPU's cumulative ticks: idle (= idle + iowait) and total
    (user + nice + system + idle + iowait + irq + softirq + steal; guest
    time is already inside user/nice)."""

    idle: int
    total: int


def parse_proc_stat(text: str) -> dict[int, CpuTimes]:
    """cpu id -> CpuTimes from the `cpuN ...` lines of /proc/stat."""
    result: dict[int, CpuTimes] = {}
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *fields = line.split()
        if not name[3:].isdigit():
            continue
        # user nice system idle iowait irq softirq steal [guest guest_nice]
        ticks = [int(f) for f in fields[:8]] + [0] * (8 - len(fields[:8]))
        result[int(name[3:])] = CpuTimes(idle=ticks[3] + ticks[4], total=sum(ticks))
    return result


def read_proc_stat(procfs: str | Path = "/proc") -> dict[int, CpuTimes]:
    """A snapshot of every online CPU's ticks from `procfs/stat`."""
    return parse_proc_stat((Path(procfs) / "stat").read_text())


def cpu_utilisation(before: Mapping[int, CpuTimes], after: Mapping[int, CpuTimes]) -> dict[int, float]:
    """Per CPU present in both snapshots: `1 - Δidle / Δtotal`, clamped to
    [0, 1]; 0 when Δtotal = 0 (no tick elapsed, or a counter went back)."""
    util = {}
    for cpu in sorted(set(before) & set(after)):
        d_total = after[cpu].total - before[cpu].total
        d_idle = after[cpu].idle - before[cpu].idle
        util[cpu] = 0.0 if d_total <= 0 else min(1.0, max(0.0, 1.0 - d_idle / d_total))
    return util


def numa_loads(util: Mapping[int, float], numa_cpus: Mapping[int, Iterable[int]]) -> dict[int, float]:
    """`numa_score(n) = mean(util[c] for c in cpus(n))` over the CPUs of n that
    were measured (§E); NUMA nodes with no measured CPU are left out."""
    loads = {}
    for numa, cpus in sorted(numa_cpus.items()):
        values = [util[c] for c in cpus if c in util]
        if values:
            loads[numa] = sum(values) / len(values)
    return loads


def node_load(loads: Mapping[int, float]) -> float:
    """Node load = mean of its NUMA loads (§E); 0 with none."""
    return sum(loads.values()) / len(loads) if loads else 0.0


def cpu_used_milli(util: Mapping[int, float]) -> int:
    """CPU in use on the node, in milli-CPUs: `round(1000 · Σ util)`."""
    return round(1000 * sum(util.values()))


# ------------------------------------------------------------- memory ------


@dataclass(frozen=True)
class MemInfo:
    total_mib: int
    available_mib: int

    @property
    def used_mib(self) -> int:
        """MemTotal − MemAvailable."""
        return max(0, self.total_mib - self.available_mib)


def parse_meminfo(text: str) -> MemInfo:
    """MemTotal and MemAvailable (kB -> MiB) from /proc/meminfo. Kernels older
    than 3.14 lack MemAvailable: MemFree + Buffers + Cached stands in."""
    kb: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            kb[key.strip()] = int(parts[0])
    if "MemTotal" not in kb:
        raise ValueError("meminfo has no MemTotal line")
    available = kb.get("MemAvailable")
    if available is None:
        available = kb.get("MemFree", 0) + kb.get("Buffers", 0) + kb.get("Cached", 0)
    return MemInfo(total_mib=kb["MemTotal"] // 1024, available_mib=available // 1024)


def read_meminfo(procfs: str | Path = "/proc") -> MemInfo:
    """Node memory from `procfs/meminfo`."""
    return parse_meminfo((Path(procfs) / "meminfo").read_text())


# --------------------------------------------------------------- pods ------


@dataclass(frozen=True)
class PodCounters:
    """Cumulative pod counters at one monotonic instant."""

    at_ns: int
    cpu_ns: dict[str, int]
    memory_bytes: dict[str, int]


@dataclass(frozen=True)
class PodSample:
    """One pod's usage over an interval. `cpu_milli` is None when there is no
    earlier sample to difference against (a new pod, or a counter reset)."""

    uid: str
    cpu_milli: int | None
    memory_mib: int


def pod_usage(before: PodCounters, after: PodCounters) -> list[PodSample]:
    """Per pod in `after`: `cpu_milli = round(1000 · Δcpu_ns / Δwall_ns)` and
    the memory in use now (bytes -> MiB), sorted by uid."""
    wall = after.at_ns - before.at_ns
    samples = []
    for uid in sorted(set(after.cpu_ns) | set(after.memory_bytes)):
        cpu_milli = None
        if wall > 0 and uid in before.cpu_ns and uid in after.cpu_ns:
            delta = after.cpu_ns[uid] - before.cpu_ns[uid]
            cpu_milli = round(1000 * delta / wall) if delta >= 0 else None
        samples.append(PodSample(uid, cpu_milli, after.memory_bytes.get(uid, 0) // (1024 * 1024)))
    return samples


def read_pod_counters(
    cgroup_root: str | Path,
    parent: str = "kubepods",
    version: CgroupVersion = "v1",
    clock: Callable[[], int] = elapsed_ns,
    cpu_controller: str = "cpuacct",
) -> PodCounters:
    """Every pod's cumulative CPU (ns) and current memory (bytes) under the
    kubepods `parent`: v1 `cpuacct/<parent>/…/cpuacct.usage` and
    `memory/<parent>/…/memory.usage_in_bytes`; v2 `<parent>/…/cpu.stat`
    usage_usec and `memory.current`. Pods whose files vanish mid-read (they
    were deleted) are left out."""
    root = Path(cgroup_root)
    at = clock()
    cpu: dict[str, int] = {}
    memory: dict[str, int] = {}
    if version == "v1":
        for uid, path in _pods(root, parent, cpu_controller).items():
            _put(cpu, uid, _read_int(path / "cpuacct.usage"))
        for uid, path in _pods(root, parent, "memory").items():
            _put(memory, uid, _read_int(path / "memory.usage_in_bytes"))
    else:
        for uid, path in _pods(root, parent, None).items():
            usec = _read_keyed(path / "cpu.stat", "usage_usec")
            _put(cpu, uid, None if usec is None else usec * 1000)
            _put(memory, uid, _read_int(path / "memory.current"))
    return PodCounters(at_ns=at, cpu_ns=cpu, memory_bytes=memory)


def _pods(root: Path, parent: str, controller: str | None) -> dict[str, Path]:
    base = parent_dir(root, parent, controller)
    return {} if base is None else list_pod_dirs(base, root)


def _put(target: dict[str, int], uid: str, value: int | None) -> None:
    if value is not None:
        target[uid] = value


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_keyed(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None
