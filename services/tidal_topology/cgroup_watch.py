"""Wake the node agent the moment a pod or container cgroup appears.

With kubelet's `--cpu-manager-policy=none` a new container starts on every
CPU of the node until the agent writes its cpuset, so an exclusive pod's
CPUs are shared for as long as the agent takes to notice. Polling the tree
every `rescan_s` made that window up to a whole period; this watches the
kubepods tree with inotify (the kernel reports a `mkdir` in cgroupfs to
watchers of the parent directory, v1 and v2 alike) and wakes the agent's
scan at once. The periodic scan stays as the safety net: an inotify queue
overflow, a tree re-created underneath, or a machine without inotify only
fall back to the period.

Watched are the directories whose new children matter: the root (kubepods),
its QoS classes (`burstable`, `besteffort`: any directory right below the
root that is not a pod) and every pod directory (its children are the
containers); containers themselves are not, since nothing the agent reads is
made inside them. A watch is added as each such directory appears, and the
directory is listed right after (a child made between the event and the new
watch is not missed).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .cgroup_paths import pod_uid_of

IN_CREATE, IN_DELETE, IN_MOVED_TO, IN_DELETE_SELF = 0x100, 0x200, 0x80, 0x400
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR, IN_ONLYDIR = 0x4000, 0x8000, 0x40000000, 0x01000000
MASK = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_DELETE_SELF | IN_ONLYDIR
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name

LOG = logging.getLogger("tidal.topology.cgroup_watch")


def _libc():
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name, use_errno=True) if name else None
    return lib if lib is not None and hasattr(lib, "inotify_init1") else None


class CgroupWatch:
    """inotify over one cgroup directory tree; `changed()` waits for the next
    directory created or removed in it. Use as `async with`, on the loop that
    awaits it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.fd: int | None = None
        self.dirs: dict[int, tuple[Path, int]] = {}  # watch descriptor -> (directory, depth below the root)
        self._event = asyncio.Event()
        self.events = 0  # directory events read, for tests and metrics
        self._warned = False  # the fallback to scanning is said once, not at every retry

    @property
    def active(self) -> bool:
        """Whether the tree is watched (False: no inotify, or the root is missing)."""
        return self.fd is not None and bool(self.dirs)

    async def __aenter__(self) -> "CgroupWatch":
        self.open()
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        """Start watching; without inotify (or the root) the watch stays
        inactive and `changed()` only times out."""
        libc = _libc()
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC) if libc is not None else -1
        if fd < 0:
            self._fall_back("no inotify here" if libc is None else f"inotify_init1: {os.strerror(ctypes.get_errno())}")
            return
        self._libc, self.fd = libc, fd
        self._add_tree(self.root, 0)
        asyncio.get_running_loop().add_reader(fd, self._readable)
        if not self.dirs:
            self._fall_back(f"{self.root} cannot be watched (yet)")

    def _fall_back(self, why: str) -> None:
        if not self._warned:
            LOG.warning("%s: new cgroups are found by the periodic scan until it can", why)
            self._warned = True

    def close(self) -> None:
        if self.fd is None:
            return
        asyncio.get_running_loop().remove_reader(self.fd)
        os.close(self.fd)
        self.fd, self.dirs = None, {}

    async def changed(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a directory created or removed in
        the tree since the last call; True when one was."""
        if not self._event.is_set():
            try:
                await asyncio.wait_for(self._event.wait(), timeout)
            except asyncio.TimeoutError:
                return False
        self._event.clear()
        return True

    # -- inotify ----------------------------------------------------------------------
    def _add_tree(self, directory: Path, depth: int) -> None:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(directory), MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if code not in (errno.ENOENT, errno.ENOTDIR):  # gone meanwhile: nothing to watch
                LOG.warning("cannot watch %s: %s", directory, os.strerror(code))
            return
        self.dirs[wd] = (directory, depth)
        try:
            children = [e for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for child in children:
            self._maybe_watch(Path(child.path), depth + 1)

    def _maybe_watch(self, directory: Path, depth: int) -> None:
        """Watch a new directory when its children can be pods or containers."""
        if pod_uid_of(directory.name) is not None or depth == 1:
            self._add_tree(directory, depth)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, 64 * 1024)
        except BlockingIOError:
            return
        except OSError as exc:
            LOG.warning("reading inotify events failed: %s", exc)
            return
        offset, woke = 0, False
        while offset + EVENT.size <= len(data):
            wd, mask, _cookie, length = EVENT.unpack_from(data, offset)
            name = data[offset + EVENT.size: offset + EVENT.size + length].rstrip(b"\0")
            offset += EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                woke = True  # events were lost: the scan looks at everything anyway
                continue
            if mask & IN_IGNORED:
                self.dirs.pop(wd, None)
                continue
            if not mask & IN_ISDIR and not mask & IN_DELETE_SELF:
                continue
            woke = True
            self.events += 1
            parent = self.dirs.get(wd)
            if parent is not None and mask & (IN_CREATE | IN_MOVED_TO):
                self._maybe_watch(parent[0] / os.fsdecode(name), parent[1] + 1)
        if woke:
            self._event.set()


async def follow_cgroups(rescan: Callable[[], Awaitable[Any]], watch: CgroupWatch, period_s: float) -> None:
    """Call `rescan` at once whenever the watched tree changes, and every
    `period_s` without a change (the safety net); a watch that is not
    active is opened again at each period, so a kubepods tree made after
    the agent started is watched from then on."""
    while True:
        await watch.changed(period_s)
        if not watch.active:
            watch.close()
            watch.open()
        await rescan()
