"""Finding pod cgroups under the kubepods parent, safely.

Every name that ends up in a path is checked against a strict pattern, and
every directory used must resolve inside the cgroup root: no `..`, no
symlink leading elsewhere. Both kubelet cgroup drivers are understood:
cgroupfs (`kubepods/burstable/pod<uid>`) and systemd
(`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

CgroupVersion = Literal["v1", "v2"]



def _uid_pattern(sep: str) -> str:
    # Static pods carry a 32-hex config hash as UID instead of an RFC 4122 UUID.
    return sep.join(f"[0-9a-f]{{{n}}}" for n in (8, 4, 4, 4, 12)) + "|[0-9a-f]{32}"


UID_RE = re.compile(_uid_pattern("-"))
_CGROUPFS_POD = re.compile(rf"pod(?P<uid>{_uid_pattern('-')})")
# The systemd driver writes the UID with '_' for '-' inside slice names.
_SYSTEMD_POD = re.compile(rf"kubepods(?:-[a-z]+)?-pod(?P<uid>{_uid_pattern('_')})\.slice")
_SEGMENT = re.compile(r"[A-Za-z0-9_.-]{1,255}")
# v1 controller mounts: "cpuacct", or joined ones such as "cpu,cpuacct".
_CONTROLLER = re.compile(r"[a-z0-9_]+(?:,[a-z0-9_]+)*")


def check_uid(uid: str) -> str:
    """'' when `uid` is a well-formed pod UID, else why not."""
    if not isinstance(uid, str) or not UID_RE.fullmatch(uid):
        return f"pod uid {uid!r} is not a UUID or 32-hex static-pod uid"
    return ""


def check_parent(parent: str) -> str:
    """'' when `parent` is a relative path of plain segments (no `.`/`..`), else why not."""
    if not isinstance(parent, str) or not parent:
        return "cgroup parent must be a non-empty relative path"
    for segment in parent.split("/"):
        if segment in (".", "..") or not _SEGMENT.fullmatch(segment):
            return f"cgroup parent {parent!r} has a disallowed segment {segment!r}"
    return ""


def inside(path: Path, root: Path) -> bool:
    """Whether `path`, with every symlink resolved, lies within `root`."""
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))
    except (OSError, ValueError):
        return False


def pod_uid_of(dirname: str) -> str | None:
    """The pod UID a cgroup directory name stands for, or None."""
    match = _CGROUPFS_POD.fullmatch(dirname)
    if match:
        return match.group("uid")
    match = _SYSTEMD_POD.fullmatch(dirname)
    if match:
        return match.group("uid").replace("_", "-")
    return None


def parent_dir(root: Path, parent: str, controller: str | None) -> Path | None:
    """`root/[controller/]parent` when the names are valid and it resolves
    inside `root`; None otherwise (or when it does not exist)."""
    if check_parent(parent) or (controller is not None and not _CONTROLLER.fullmatch(controller)):
        return None
    base = root / controller / parent if controller else root / parent
    if not base.is_dir() or not inside(base, root):
        return None
    return base


def list_pod_dirs(base: Path, root: Path) -> dict[str, Path]:
    """uid -> cgroup directory of every pod directly under `base` or one QoS
    level below it. Symlinked entries are never followed."""
    found: dict[str, Path] = {}
    for entry, _depth in _walk(base, 0):
        uid = pod_uid_of(entry.name)
        if uid is not None and uid not in found and inside(Path(entry.path), root):
            found[uid] = Path(entry.path)
    return found


def _walk(directory: Path, depth: int):
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            continue
        yield entry, depth
        # Only non-pod directories (QoS classes) are descended into, one level deep.
        if depth == 0 and pod_uid_of(entry.name) is None:
            yield from _walk(Path(entry.path), depth + 1)


def find_pod_dir(root: Path, parent: str, uid: str, controller: str | None = None) -> Path | None:
    """The cgroup directory of pod `uid` under `root/[controller/]parent`, or
    None when absent. The uid must already have passed `check_uid`."""
    base = parent_dir(root, parent, controller)
    if base is None:
        return None
    return list_pod_dirs(base, root).get(uid)


def detect_version(root: Path) -> CgroupVersion:
    """v2 when `root` is a unified hierarchy (it has `cgroup.controllers`), else v1."""
    return "v2" if (root / "cgroup.controllers").exists() else "v1"
