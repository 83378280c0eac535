"""§E actuation on a pod's cgroup: freeze, thaw, set cpuset.

- cgroup v1: `freezer/<parent>/…/pod<uid>/freezer.state` FROZEN / THAWED,
  waiting until the state reads back; `cpuset/<parent>/…/pod<uid>/cpuset.{cpus,mems}`.
- cgroup v2: `<parent>/…/pod<uid>/cgroup.freeze` 1 / 0, waiting for
  `cgroup.events` to say `frozen 1` / `frozen 0`; `cpuset.{cpus,mems}`.

Every operation is idempotent and returns an `Outcome`: `done`, `failed`
(with the reason), `unknown-pod`, or `refused` (a pod uid or parent that
fails validation — nothing is touched). Files are opened with O_NOFOLLOW and
every directory must resolve inside the cgroup root.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tidal_clock import elapsed

from .cgroup_paths import CgroupVersion, check_parent, check_uid, find_pod_dir, inside, list_pod_dirs, parent_dir
from .cpuset import format_cpuset, parse_cpuset

_POLL_S = 0.01


@dataclass(frozen=True)
class CgroupFs:
    """Where pod cgroups live: the cgroup mount (v1: the directory holding the
    controller mounts; v2: the unified mount) and the kubepods parent."""

    root: Path
    parent: str = "kubepods"
    version: CgroupVersion = "v1"
    blocking = True  # the agent's seam (`cgroup_tree.CgroupTree`), answered from the filesystem

    def pods_root(self) -> Path:
        """The directory pod cgroups are made in: v1 the cpuset controller's
        `<parent>`, v2 the unified `<parent>` (it may not exist yet)."""
        return self.root / "cpuset" / self.parent if self.version == "v1" else self.root / self.parent

    def scan_pod_cpusets(self) -> dict[str, PodCpuset]:
        return scan_pod_cpusets(self)

    def set_pod_cpuset(self, uid: str, cpus: Iterable[int], mems: Iterable[int] | None = None) -> Outcome:
        return set_pod_cpuset(self, uid, cpus, mems)

    def freeze_pod(self, uid: str) -> Outcome:
        return freeze_pod(self, uid)

    def thaw_pod(self, uid: str) -> Outcome:
        return thaw_pod(self, uid)

    def pod_frozen(self, uid: str) -> bool | None:
        return pod_frozen(self, uid)

    def pod_cpuset(self, uid: str) -> list[int] | None:
        return pod_cpuset(self, uid)


@dataclass(frozen=True)
class Outcome:
    status: Literal["done", "failed", "unknown-pod", "refused"]
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "done"


def _locate(fs: CgroupFs, uid: str, controller: str | None) -> Path | Outcome:
    problem = check_uid(uid) or check_parent(fs.parent)
    if problem:
        return Outcome("refused", problem)
    pod_dir = find_pod_dir(Path(fs.root), fs.parent, uid, controller if fs.version == "v1" else None)
    if pod_dir is None:
        where = f"{controller}/{fs.parent}" if fs.version == "v1" else fs.parent
        return Outcome("unknown-pod", f"no cgroup for pod {uid} under {Path(fs.root) / where}")
    return pod_dir


def _read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            return os.read(fd, 65536).decode()
        finally:
            os.close(fd)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _write(path: Path, text: str) -> None:
    # O_NOFOLLOW: a control file replaced by a symlink must not redirect the write.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _why(exc: OSError) -> str:
    return f"{exc.filename}: {exc.strerror or exc}"


def _frozen(fs: CgroupFs, pod_dir: Path) -> tuple[bool, str]:
    """(frozen?, what the kernel says) for a located pod directory."""
    if fs.version == "v1":
        state = _read(pod_dir / "freezer.state").strip()
        return state == "FROZEN", f"freezer.state {state}"
    events = dict(line.split(" ", 1) for line in _read(pod_dir / "cgroup.events").splitlines() if " " in line)
    return events.get("frozen", "").strip() == "1", f"cgroup.events frozen {events.get('frozen', '?').strip()}"


def pod_frozen(fs: CgroupFs, uid: str) -> bool | None:
    """Whether pod `uid` is frozen now; None when it cannot be told."""
    pod_dir = _locate(fs, uid, "freezer")
    if isinstance(pod_dir, Outcome):
        return None
    try:
        return _frozen(fs, pod_dir)[0]
    except OSError:
        return None


def pod_cpuset(fs: CgroupFs, uid: str) -> list[int] | None:
    """The CPUs pod `uid`'s cgroup is pinned to now; None when it cannot be told."""
    pod_dir = _locate(fs, uid, "cpuset")
    if isinstance(pod_dir, Outcome):
        return None
    try:
        return parse_cpuset(_read(pod_dir / "cpuset.cpus"))
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class PodCpuset:
    """A pod cgroup as found: its cpuset (None when unreadable) and the
    names of the cgroups below it (its containers)."""

    cpus: tuple[int, ...] | None
    children: frozenset[str]


def scan_pod_cpusets(fs: CgroupFs) -> dict[str, PodCpuset]:
    """Every pod cgroup under the parent (cpuset hierarchy on v1): uid -> its
    cpuset and container cgroups. Empty when the parent does not exist."""
    problem = check_parent(fs.parent)
    base = None if problem else parent_dir(Path(fs.root), fs.parent, "cpuset" if fs.version == "v1" else None)
    if base is None:
        return {}
    found = {}
    for uid, pod_dir in list_pod_dirs(base, Path(fs.root)).items():
        try:
            cpus: tuple[int, ...] | None = tuple(parse_cpuset(_read(pod_dir / "cpuset.cpus")))
        except (OSError, ValueError):
            cpus = None
        try:
            children = frozenset(e.name for e in os.scandir(pod_dir) if e.is_dir(follow_symlinks=False))
        except OSError:
            children = frozenset()
        found[uid] = PodCpuset(cpus, children)
    return found


def freeze_pod(fs: CgroupFs, uid: str, timeout_s: float = 5.0) -> Outcome:
    """Freeze every process of pod `uid` and wait (at most `timeout_s`)
    until the kernel reports the cgroup frozen."""
    return _set_frozen(fs, uid, True, timeout_s)


def thaw_pod(fs: CgroupFs, uid: str, timeout_s: float = 5.0) -> Outcome:
    """Thaw pod `uid` and wait (at most `timeout_s`) until it reads thawed."""
    return _set_frozen(fs, uid, False, timeout_s)


def _set_frozen(fs: CgroupFs, uid: str, frozen: bool, timeout_s: float) -> Outcome:
    pod_dir = _locate(fs, uid, "freezer")
    if isinstance(pod_dir, Outcome):
        return pod_dir
    verb = "frozen" if frozen else "thawed"
    control, value = (("freezer.state", "FROZEN" if frozen else "THAWED") if fs.version == "v1"
                      else ("cgroup.freeze", "1" if frozen else "0"))
    deadline = elapsed() + timeout_s
    try:
        is_frozen, said = _frozen(fs, pod_dir)
        if is_frozen == frozen:
            return Outcome("done", f"already {verb}")
        while True:
            # v1 can stay FREEZING while a task is busy in the kernel; writing
            # again re-triggers the freeze, as runc does.
            _write(pod_dir / control, value)
            is_frozen, said = _frozen(fs, pod_dir)
            if is_frozen == frozen:
                return Outcome("done", verb)
            if elapsed() >= deadline:
                return Outcome("failed", f"not {verb} after {timeout_s:g}s: {said}{_parent_hint(fs, pod_dir)}")
            time.sleep(_POLL_S)
    except OSError as exc:
        return Outcome("failed", _why(exc))


def _parent_hint(fs: CgroupFs, pod_dir: Path) -> str:
    flag = pod_dir / "freezer.parent_freezing"
    if fs.version == "v1" and flag.exists() and _read(flag).strip() == "1":
        return " (a parent cgroup is frozen)"
    return ""


def _subtree(pod_dir: Path, root: Path) -> list[Path]:
    """The pod directory and its descendants, parents before children,
    symlinks neither followed nor listed."""
    dirs = []
    for current, subdirs, _files in os.walk(pod_dir, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if not os.path.islink(os.path.join(current, d)))
        if inside(Path(current), root):
            dirs.append(Path(current))
    return dirs


def set_pod_cpuset(fs: CgroupFs, uid: str, cpus: Iterable[int], mems: Iterable[int] | None = None) -> Outcome:
    """Pin pod `uid` (and every container cgroup in it) to `cpus`, and to the
    memory nodes `mems` when given.

    cgroup v1 requires each child's cpuset to stay within its parent's, so the
    subtree is first widened top-down to old ∪ new, then narrowed bottom-up
    to new; v2 has no such rule and is written top-down. The pod's value is
    read back and compared."""
    wanted_cpus = sorted(set(cpus))
    wanted_mems = None if mems is None else sorted(set(mems))
    if not wanted_cpus or (wanted_mems is not None and not wanted_mems):
        return Outcome("refused", "a cpuset needs at least one cpu (and one memory node when mems are given)")
    if wanted_cpus[0] < 0 or (wanted_mems and wanted_mems[0] < 0):
        return Outcome("refused", "cpu and memory node ids are non-negative")
    pod_dir = _locate(fs, uid, "cpuset")
    if isinstance(pod_dir, Outcome):
        return pod_dir
    files = [("cpuset.cpus", wanted_cpus)] + ([("cpuset.mems", wanted_mems)] if wanted_mems is not None else [])
    try:
        tree = _subtree(pod_dir, Path(fs.root))
        if fs.version == "v1":
            for directory in tree:
                for name, wanted in files:
                    current = parse_cpuset(_read(directory / name))
                    _write(directory / name, format_cpuset(set(current) | set(wanted)))
        for directory in (reversed(tree) if fs.version == "v1" else tree):
            for name, wanted in files:
                _write(directory / name, format_cpuset(wanted))
        for name, wanted in files:
            now = parse_cpuset(_read(pod_dir / name))
            if now != wanted:
                return Outcome("failed", f"{name} reads {format_cpuset(now)!r} after writing {format_cpuset(wanted)!r}")
    except OSError as exc:
        return Outcome("failed", _why(exc))
    except ValueError as exc:
        return Outcome("failed", f"unreadable cpuset file: {exc}")
    return Outcome("done", f"cpus {format_cpuset(wanted_cpus)}"
                   + (f" mems {format_cpuset(wanted_mems)}" if wanted_mems is not None else ""))
