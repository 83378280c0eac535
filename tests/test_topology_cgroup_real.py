"""Freeze, thaw and cpuset on the real kernel: a busy-looping child process in
a fresh pod cgroup must stop accumulating CPU time when frozen, start again
when thawed, and change its allowed CPUs when its cpuset is rewritten.

Needs a writable cgroup filesystem (this machine: v1 controllers under
/sys/fs/cgroup plus a v2 hierarchy at /sys/fs/cgroup/unified, as root);
skips with the reason elsewhere. Every wait is polled with a deadline."""

from __future__ import annotations

import errno
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tidal_topology.cgroups import CgroupFs, freeze_pod, pod_cpuset, pod_frozen, set_pod_cpuset, thaw_pod
from tidal_topology.cpuset import parse_cpuset
from conftest import patience

pytestmark = pytest.mark.cgroup

CGROUP = Path("/sys/fs/cgroup")
UNIFIED = CGROUP / "unified"


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + patience(timeout)
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {patience(timeout):g}s waiting for {what}")
        time.sleep(0.01)


def cpu_ticks(pid: int) -> int:
    """utime + stime of `pid` from /proc/PID/stat (fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # after "comm)": field 3 onwards
    return int(fields[11]) + int(fields[12])


def allowed_cpus(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpuset(line.split(":", 1)[1])
    raise AssertionError("no Cpus_allowed_list in /proc/PID/status")


def stays_flat(pid: int, seconds: float) -> tuple[int, int]:
    """CPU ticks at the start and the highest seen over `seconds` (polled)."""
    start = highest = cpu_ticks(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        highest = max(highest, cpu_ticks(pid))
        time.sleep(0.02)
    return start, highest


def make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            pytest.skip(f"cgroup filesystem not writable here: cannot create {path} ({exc.strerror})")
        raise


def busy_child() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@dataclass
class Pod:
    uid: str
    parent: str
    proc: subprocess.Popen
    dirs: list[Path]  # created directories, parents first


def cleanup(pod: Pod, thaw_files: list[Path]) -> None:
    # A task frozen by the v1 freezer cannot die until thawed: thaw first, then kill.
    for control, value in ((f, "THAWED" if f.name == "freezer.state" else "0") for f in thaw_files):
        if control.exists():
            control.write_text(value)
    pod.proc.kill()
    pod.proc.wait(timeout=patience(10))
    for directory in reversed(pod.dirs):
        deadline = time.monotonic() + patience(5)
        while directory.exists():
            try:
                directory.rmdir()
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)  # the exited task leaves the cgroup asynchronously


@pytest.fixture
def v1_pod() -> Iterator[Pod]:
    if not (CGROUP / "freezer").is_dir() or not (CGROUP / "cpuset").is_dir():
        pytest.skip("no cgroup v1 freezer and cpuset controllers mounted under /sys/fs/cgroup")
    parent, uid = f"tidal-test-{uuid.uuid4().hex[:10]}", str(uuid.uuid4())
    freezer_pod = CGROUP / "freezer" / parent / f"pod{uid}"
    cpuset_parent = CGROUP / "cpuset" / parent
    cpuset_pod, container = cpuset_parent / f"pod{uid}", cpuset_parent / f"pod{uid}" / "ctr"
    dirs: list[Path] = []
    proc = None
    try:
        for directory in (freezer_pod.parent, freezer_pod, cpuset_parent, cpuset_pod, container):
            make_dir(directory)
            dirs.append(directory)
        for directory in (cpuset_parent, cpuset_pod, container):
            # a new v1 cpuset starts empty; it needs cpus and mems before it can hold a task
            for name in ("cpuset.cpus", "cpuset.mems"):
                (directory / name).write_text((CGROUP / "cpuset" / name).read_text())
        proc = busy_child()
        (freezer_pod / "cgroup.procs").write_text(str(proc.pid))
        (container / "cgroup.procs").write_text(str(proc.pid))
        yield Pod(uid, parent, proc, dirs)
    finally:
        if proc is not None:
            cleanup(Pod(uid, parent, proc, dirs), [freezer_pod / "freezer.state"])
        else:
            for directory in reversed(dirs):
                directory.rmdir()


def test_v1_freeze_stops_cpu_time_and_thaw_resumes_it(v1_pod):
    fs = CgroupFs(root=CGROUP, parent=v1_pod.parent, version="v1")
    pid = v1_pod.proc.pid
    first = cpu_ticks(pid)
    wait_for(lambda: cpu_ticks(pid) > first, 10, "the busy child to use CPU")

    assert freeze_pod(fs, v1_pod.uid).status == "done"
    assert pod_frozen(fs, v1_pod.uid) is True
    start, highest = stays_flat(pid, 0.5)
    assert highest == start, f"frozen child still ran: {start} -> {highest} ticks"
    again = freeze_pod(fs, v1_pod.uid)
    assert (again.status, again.reason) == ("done", "already frozen")

    assert thaw_pod(fs, v1_pod.uid).status == "done"
    assert pod_frozen(fs, v1_pod.uid) is False
    thawed_at = cpu_ticks(pid)
    wait_for(lambda: cpu_ticks(pid) > thawed_at, 10, "the thawed child to use CPU again")


def test_v1_cpuset_moves_the_process(v1_pod):
    cpus = parse_cpuset((CGROUP / "cpuset/cpuset.cpus").read_text())
    mems = parse_cpuset((CGROUP / "cpuset/cpuset.mems").read_text())
    if len(cpus) < 2:
        pytest.skip(f"needs two CPUs to show a move, this cgroup has {cpus}")
    fs = CgroupFs(root=CGROUP, parent=v1_pod.parent, version="v1")
    pid = v1_pod.proc.pid
    assert allowed_cpus(pid) == cpus

    result = set_pod_cpuset(fs, v1_pod.uid, [cpus[-1]], mems=mems[:1])
    assert result.status == "done", result.reason
    wait_for(lambda: allowed_cpus(pid) == [cpus[-1]], 5, f"Cpus_allowed_list = {cpus[-1]}")
    assert pod_cpuset(fs, v1_pod.uid) == [cpus[-1]]

    # a disjoint move: the container holds {last}, the pod must go to {first};
    # writing the pod first would be EBUSY on v1, so this proves the widen/narrow order
    result = set_pod_cpuset(fs, v1_pod.uid, [cpus[0]], mems=mems[:1])
    assert result.status == "done", result.reason
    wait_for(lambda: allowed_cpus(pid) == [cpus[0]], 5, f"Cpus_allowed_list = {cpus[0]}")
    container = CGROUP / "cpuset" / v1_pod.parent / f"pod{v1_pod.uid}" / "ctr"
    assert parse_cpuset((container / "cpuset.cpus").read_text()) == [cpus[0]]


@pytest.fixture
def v2_pod() -> Iterator[Pod]:
    if not (UNIFIED / "cgroup.procs").exists():
        pytest.skip("no cgroup v2 hierarchy at /sys/fs/cgroup/unified")
    parent, uid = f"tidal-test-{uuid.uuid4().hex[:10]}", str(uuid.uuid4())
    pod_dir = UNIFIED / parent / f"pod{uid}"
    dirs: list[Path] = []
    proc = None
    try:
        for directory in (pod_dir.parent, pod_dir):
            make_dir(directory)
            dirs.append(directory)
        if not (pod_dir / "cgroup.freeze").exists():
            pytest.skip("this kernel's cgroup v2 has no cgroup.freeze (needs Linux >= 5.2)")
        proc = busy_child()
        (pod_dir / "cgroup.procs").write_text(str(proc.pid))
        yield Pod(uid, parent, proc, dirs)
    finally:
        if proc is not None:
            cleanup(Pod(uid, parent, proc, dirs), [pod_dir / "cgroup.freeze"])
        else:
            for directory in reversed(dirs):
                directory.rmdir()


def test_v2_freeze_stops_cpu_time_and_thaw_resumes_it(v2_pod):
    fs = CgroupFs(root=UNIFIED, parent=v2_pod.parent, version="v2")
    pid = v2_pod.proc.pid
    first = cpu_ticks(pid)
    wait_for(lambda: cpu_ticks(pid) > first, 10, "the busy child to use CPU")

    assert freeze_pod(fs, v2_pod.uid).status == "done"
    assert pod_frozen(fs, v2_pod.uid) is True
    start, highest = stays_flat(pid, 0.5)
    assert highest == start, f"frozen child still ran: {start} -> {highest} ticks"

    assert thaw_pod(fs, v2_pod.uid).status == "done"
    thawed_at = cpu_ticks(pid)
    wait_for(lambda: cpu_ticks(pid) > thawed_at, 10, "the thawed child to use CPU again")

