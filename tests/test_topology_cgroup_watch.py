"""The cgroup watch on this machine's real cgroup v1 cpuset hierarchy: a
`mkdir` of a QoS class, a pod (in a QoS class, or right below kubepods as a
Guaranteed pod is) and a container cgroup each wakes the watcher without
any scan, directories made before the watch are watched too, and a
directory inside a container is not (the agent never looks there)."""

from __future__ import annotations

import uuid

import pytest

from test_topology_cgroup_real import CGROUP, make_dir
from tidal_topology.cgroup_watch import CgroupWatch

pytestmark = pytest.mark.cgroup
NEVER_S = 120.0  # a generous bound on an event the kernel sends at once


@pytest.fixture
def kubepods():
    if not (CGROUP / "cpuset").is_dir():
        pytest.skip("no cgroup v1 cpuset hierarchy under /sys/fs/cgroup")
    base = CGROUP / "cpuset" / f"tidal-watch-{uuid.uuid4().hex[:10]}"
    make_dir(base)
    try:
        yield base
    finally:
        for directory in sorted(base.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir():
                directory.rmdir()
        base.rmdir()


async def test_each_new_cgroup_level_wakes_the_watch(kubepods):
    async with CgroupWatch(kubepods) as watch:
        assert watch.active
        assert not await watch.changed(timeout=0.05)  # nothing happened yet
        for level in ("burstable", f"burstable/pod{uuid.uuid4()}", f"pod{uuid.uuid4()}", None):
            path = kubepods / level if level else next((kubepods / "burstable").glob("pod*")) / "ctr-1"
            path.mkdir()
            assert await watch.changed(timeout=NEVER_S), f"no wake-up for {path}"
        before = watch.events
        (next((kubepods / "burstable").glob("pod*")) / "ctr-1" / "deeper").mkdir()
        assert not await watch.changed(timeout=0.2)
        assert watch.events == before


async def test_directories_made_before_the_watch_are_watched(kubepods):
    pod = kubepods / "besteffort" / f"pod{uuid.uuid4()}"
    pod.mkdir(parents=True)
    async with CgroupWatch(kubepods) as watch:
        (pod / "ctr").mkdir()
        assert await watch.changed(timeout=NEVER_S)
        (pod / "ctr").rmdir()
        assert await watch.changed(timeout=NEVER_S)  # a container going is a change too


async def test_a_missing_root_leaves_the_watch_inactive(tmp_path):
    async with CgroupWatch(tmp_path / "absent") as watch:
        assert not watch.active
        assert not await watch.changed(timeout=0.05)
