"""Cgroup actuation on temp trees: lookup, idempotency, bounded waits, and
hostile input. The kernel's own behaviour is in test_topology_cgroup_real.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tidal_topology.cgroup_paths import check_parent, check_uid, pod_uid_of
from tidal_topology.cgroups import CgroupFs, freeze_pod, pod_cpuset, pod_frozen, set_pod_cpuset, thaw_pod
from conftest import patience

UID = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
OTHER = "11111111-2222-3333-4444-555555555555"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def v1_pod(root: Path, uid: str = UID, qos: str = "besteffort", containers: tuple[str, ...] = ()) -> CgroupFs:
    """A cgroupfs-driver v1 layout with regular files standing in for control files."""
    write(root / "freezer/kubepods" / qos / f"pod{uid}" / "freezer.state", "THAWED\n")
    for directory in [Path(f"pod{uid}")] + [Path(f"pod{uid}") / c for c in containers]:
        base = root / "cpuset/kubepods" / qos / directory
        write(base / "cpuset.cpus", "0-7\n")
        write(base / "cpuset.mems", "0-1\n")
    return CgroupFs(root=root, parent="kubepods", version="v1")


def v2_pod(root: Path, frozen: str = "0") -> tuple[CgroupFs, Path]:
    """A systemd-driver v2 layout."""
    pod = root / "kubepods.slice/kubepods-burstable.slice" / f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    write(root / "cgroup.controllers", "cpuset cpu memory\n")
    write(pod / "cgroup.freeze", f"{frozen}\n")
    write(pod / "cgroup.events", f"populated 1\nfrozen {frozen}\n")
    write(pod / "cpuset.cpus", "\n")
    write(pod / "cpuset.mems", "\n")
    return CgroupFs(root=root, parent="kubepods.slice", version="v2"), pod


def test_v1_freeze_and_thaw_are_idempotent(tmp_path):
    fs = v1_pod(tmp_path)
    state = tmp_path / "freezer/kubepods/besteffort" / f"pod{UID}" / "freezer.state"
    assert freeze_pod(fs, UID).status == "done"
    assert state.read_text() == "FROZEN" and pod_frozen(fs, UID) is True
    again = freeze_pod(fs, UID)
    assert again.status == "done" and again.reason == "already frozen"
    assert thaw_pod(fs, UID).status == "done" and state.read_text() == "THAWED"
    assert thaw_pod(fs, UID).reason == "already thawed"
    assert pod_frozen(fs, UID) is False


def test_v2_already_frozen_pod_succeeds_without_writing(tmp_path):
    fs, pod = v2_pod(tmp_path, frozen="1")
    result = freeze_pod(fs, UID)
    assert result.status == "done" and result.reason == "already frozen"
    assert pod_frozen(fs, UID) is True


def test_v2_freeze_that_never_completes_fails_within_the_timeout(tmp_path):
    # a regular file never flips cgroup.events: the wait must end at the deadline with the reason
    fs, pod = v2_pod(tmp_path, frozen="0")
    start = time.monotonic()
    result = freeze_pod(fs, UID, timeout_s=0.2)
    elapsed = time.monotonic() - start
    assert result.status == "failed" and "not frozen after 0.2s" in result.reason
    assert "cgroup.events frozen 0" in result.reason
    assert 0.2 <= elapsed < patience(2.0)  # it waited its timeout, and then ended
    assert (pod / "cgroup.freeze").read_text() == "1"  # the request was written


def test_unknown_pod(tmp_path):
    fs = v1_pod(tmp_path)
    for action in (freeze_pod, thaw_pod):
        result = action(fs, OTHER)
        assert result.status == "unknown-pod" and OTHER in result.reason
    assert set_pod_cpuset(fs, OTHER, [1]).status == "unknown-pod"
    assert pod_frozen(fs, OTHER) is None


def test_missing_controller_file_fails_with_the_path(tmp_path):
    fs = v1_pod(tmp_path)
    (tmp_path / "freezer/kubepods/besteffort" / f"pod{UID}" / "freezer.state").unlink()
    result = freeze_pod(fs, UID)
    assert result.status == "failed" and "freezer.state" in result.reason


def test_set_cpuset_v1_writes_pod_and_containers(tmp_path):
    fs = v1_pod(tmp_path, containers=("ctr-a", "ctr-b"))
    result = set_pod_cpuset(fs, UID, [3, 2], mems=[1])
    assert result.status == "done" and result.reason == "cpus 2-3 mems 1"
    pod = tmp_path / "cpuset/kubepods/besteffort" / f"pod{UID}"
    for directory in (pod, pod / "ctr-a", pod / "ctr-b"):
        assert (directory / "cpuset.cpus").read_text() == "2-3"
        assert (directory / "cpuset.mems").read_text() == "1"
    assert set_pod_cpuset(fs, UID, [2, 3], mems=[1]).status == "done"  # idempotent
    assert pod_cpuset(fs, UID) == [2, 3]
    assert pod_cpuset(fs, OTHER) is None


def test_set_cpuset_without_mems_leaves_mems(tmp_path):
    fs = v1_pod(tmp_path)
    assert set_pod_cpuset(fs, UID, [5]).reason == "cpus 5"
    assert (tmp_path / "cpuset/kubepods/besteffort" / f"pod{UID}" / "cpuset.mems").read_text() == "0-1\n"


def test_set_cpuset_v2_systemd_layout(tmp_path):
    fs, pod = v2_pod(tmp_path)
    assert set_pod_cpuset(fs, UID, [0, 1, 2, 6], mems=[0]).status == "done"
    assert (pod / "cpuset.cpus").read_text() == "0-2,6"


@pytest.mark.parametrize("cpus, mems", [([], None), ([1], []), ([-1], None), ([1], [-2])])
def test_set_cpuset_refuses_empty_or_negative(tmp_path, cpus, mems):
    fs = v1_pod(tmp_path)
    assert set_pod_cpuset(fs, UID, cpus, mems).status == "refused"


# ------------------------------------------------------------- hostile ------

HOSTILE_UIDS = [
    "../../../../etc",
    f"{UID}/../..",
    f"{UID}\n",  # `$` in a naive regex would accept this
    UID.upper(),
    "",
    f"pod{UID}",
    "*",
    f"{UID[:-1]}",
    "0b1c2d3e_4f50_6172_8394_a5b6c7d8e9f0",  # systemd spelling is a directory name, not a uid
    None,
]


@pytest.mark.parametrize("uid", HOSTILE_UIDS, ids=repr)
def test_hostile_uids_are_refused(tmp_path, uid):
    fs = v1_pod(tmp_path)
    for action in (freeze_pod, thaw_pod):
        result = action(fs, uid)
        assert result.status == "refused" and "pod uid" in result.reason
    assert set_pod_cpuset(fs, uid, [1]).status == "refused"
    assert check_uid(uid)


HOSTILE_PARENTS = ["..", "../kubepods", "/etc", "kubepods/../../x", "a//b", "a/./b", "kubepods\n", "", "a b"]


@pytest.mark.parametrize("parent", HOSTILE_PARENTS, ids=repr)
def test_hostile_parents_are_refused(tmp_path, parent):
    v1_pod(tmp_path)
    fs = CgroupFs(root=tmp_path, parent=parent, version="v1")
    result = freeze_pod(fs, UID)
    assert result.status == "refused" and "cgroup parent" in result.reason
    assert check_parent(parent)


def outside_target(tmp_path: Path) -> Path:
    target = tmp_path / "outside" / f"pod{UID}"
    write(target / "freezer.state", "THAWED\n")
    write(target / "cpuset.cpus", "0-7\n")
    return target


def test_symlinked_pod_dir_escaping_the_root_is_not_followed(tmp_path):
    root = tmp_path / "cg"
    (root / "freezer/kubepods").mkdir(parents=True)
    target = outside_target(tmp_path)
    os.symlink(target, root / "freezer/kubepods" / f"pod{UID}")
    result = freeze_pod(CgroupFs(root=root), UID)
    assert result.status == "unknown-pod"
    assert (target / "freezer.state").read_text() == "THAWED\n"  # untouched


def test_symlinked_qos_dir_is_not_followed(tmp_path):
    root = tmp_path / "cg"
    (root / "freezer/kubepods").mkdir(parents=True)
    target = outside_target(tmp_path)
    os.symlink(target.parent, root / "freezer/kubepods/burstable")
    assert freeze_pod(CgroupFs(root=root), UID).status == "unknown-pod"
    assert (target / "freezer.state").read_text() == "THAWED\n"


def test_symlinked_parent_escaping_the_root_is_not_used(tmp_path):
    root = tmp_path / "cg"
    (root / "freezer").mkdir(parents=True)
    outside_target(tmp_path)
    os.symlink(tmp_path / "outside", root / "freezer/kubepods")
    assert freeze_pod(CgroupFs(root=root), UID).status == "unknown-pod"


def test_symlinked_control_file_is_not_written_through(tmp_path):
    fs = v1_pod(tmp_path / "cg")
    victim = write(tmp_path / "victim", "precious\n")
    state = tmp_path / "cg/freezer/kubepods/besteffort" / f"pod{UID}" / "freezer.state"
    state.unlink()
    os.symlink(victim, state)
    result = freeze_pod(fs, UID)
    assert result.status == "failed"
    assert victim.read_text() == "precious\n"


def test_symlinked_container_dir_is_not_written_through(tmp_path):
    fs = v1_pod(tmp_path / "cg")
    target = outside_target(tmp_path)
    os.symlink(target, tmp_path / "cg/cpuset/kubepods/besteffort" / f"pod{UID}" / "evil")
    assert set_pod_cpuset(fs, UID, [1]).status == "done"
    assert (target / "cpuset.cpus").read_text() == "0-7\n"


DIRNAMES = [
    (f"pod{UID}", UID),
    (f"kubepods-burstable-pod{UID.replace('-', '_')}.slice", UID),
    (f"kubepods-pod{UID.replace('-', '_')}.slice", UID),
    ("pod6f1e2d3c4b5a69788796a5b4c3d2e1f0", "6f1e2d3c4b5a69788796a5b4c3d2e1f0"),  # static pod
    (f"pod{UID}.bak", None),
    (f"kubepods-burstable-pod{UID}.slice", None),  # systemd names never carry '-' in the uid
    ("burstable", None),
    (f"xpod{UID}", None),
]


@pytest.mark.parametrize("name, uid", DIRNAMES)
def test_pod_uid_of_directory_names(name, uid):
    assert pod_uid_of(name) == uid
