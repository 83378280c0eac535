"""Hotspot remediation end to end on this machine: the real node agent, real
busy processes in their own cgroups as pods, frozen, moved and thawed through
the real cgroup filesystem. cpu0 and cpu1 are declared two NUMA nodes; every
pod starts pinned to cpu0, which makes NUMA 0 a hotspot.

The per-CPU load the agent reads is the test's own: a /proc of the test's
(`OwnLoad`, the agent's procfs root) whose CPU times count a CPU busy for
as long as the test's pods on it wanted to run (their run plus run-queue
time, /proc/PID/schedstat, split over the CPUs their cpuset allows) and
idle for the rest. Other work on the machine neither fills the NUMA node a
pod is moved to nor hides the hotspot (a pod waiting for the CPU still
wants it), so the test runs the same on a busy machine as on a quiet one;
a frozen pod wants nothing, which is what cools NUMA 0 once its last busy
pod is gone."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from builders import pod
from conftest import make_bus, patience, start_service, stop_service, wait_until
from test_topology_cgroup_real import allowed_cpus
from tidal_bus import StartAt
from tidal_remediation.service import RemediationService
from tidal_remediation.settings import RemediationSettings
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

pytestmark = pytest.mark.cgroup
CGROUP = Path("/sys/fs/cgroup")
CONTROLLERS = ("freezer", "cpuset", "cpuacct", "memory")
NODE = "hot-node"


def _write(path: Path, text: str) -> None:
    path.write_text(text)


# A pod's process: busy 65 ms of every 100 ms by the clock, so that it wants
# 0.65 of a CPU however busy the machine is (its wait for the CPU counts as
# wanting it). Two make a CPU hot (above 0.8); one alone is neither hot nor
# cold (below 0.6), so neither the NUMA node it is moved to nor the one it
# leaves calls for another action, and once it is gone its NUMA node is cold.
DUTY = """
import time
period, busy = 0.1, 0.065
start = time.monotonic()
while True:
    while time.monotonic() < start + busy:
        pass
    start += period
    pause = start - time.monotonic()
    if pause > 0:
        time.sleep(pause)
    else:  # behind (frozen, or kept off the CPU): start afresh
        start = time.monotonic()
"""


@pytest.fixture
def pods_on_cpu0():
    """Four pods pinned to cpu0, each wanting 0.65 of it (DUTY): be-1, be-2
    best-effort; ls-1, ls-2 latency-sensitive."""
    if not all((CGROUP / c).is_dir() for c in CONTROLLERS):
        pytest.skip("needs cgroup v1 freezer, cpuset, cpuacct and memory controllers")
    if len((CGROUP / "cpuset/cpuset.cpus").read_text().strip()) < 3:
        pytest.skip("needs at least two CPUs")
    parent = f"tidal-test-{uuid.uuid4().hex[:8]}"
    made, procs, pods = [], [], {}
    try:
        for controller in CONTROLLERS:
            try:
                (CGROUP / controller / parent).mkdir()
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    pytest.skip(f"cgroup filesystem not writable: {exc.strerror}")
                raise
            made.append(CGROUP / controller / parent)
        for name in ("cpuset.cpus", "cpuset.mems"):
            _write(CGROUP / "cpuset" / parent / name, (CGROUP / "cpuset" / name).read_text())
        for name in ("be-1", "be-2", "ls-1", "ls-2"):
            uid = str(uuid.uuid4())
            proc = subprocess.Popen([sys.executable, "-c", DUTY])
            procs.append(proc)
            for controller in CONTROLLERS:
                directory = CGROUP / controller / parent / f"pod{uid}"
                directory.mkdir()
                made.append(directory)
                if controller == "cpuset":
                    _write(directory / "cpuset.cpus", "0")
                    _write(directory / "cpuset.mems", (CGROUP / "cpuset/cpuset.mems").read_text().split("-")[0])
                _write(directory / "cgroup.procs", str(proc.pid))
            pods[name] = (uid, proc)
        yield parent, pods
    finally:
        for directory in made:
            state = directory / "freezer.state"
            if state.exists():
                state.write_text("THAWED")
        for proc in procs:
            proc.kill()
            proc.wait(timeout=patience(10))
        for directory in reversed(made):
            deadline = time.monotonic() + patience(5)
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)


_start = start_service
_stop = stop_service


class Observer:
    """Follows node.action and action.result once, instead of re-reading them."""

    def __init__(self, bus) -> None:
        self.actions: dict[str, object] = {}
        self.results: dict[str, object] = {}
        self.tasks = [asyncio.create_task(self._follow(bus, "node.action", self.actions)),
                      asyncio.create_task(self._follow(bus, "action.result", self.results))]

    @staticmethod
    async def _follow(bus, name, into) -> None:
        async for _, event in bus.read(name, StartAt.earliest(), follow=True):
            into[event.payload.action_id] = event.payload

    def done(self, kind: str | None = None) -> list[tuple[str, str]]:
        return [(a.kind, a.pod.split("/")[1]) for i, a in self.actions.items()
                if i in self.results and self.results[i].status == "done" and kind in (None, a.kind)]

    async def wait_for(self, kind: str, count: int, timeout: float = 30) -> list[tuple[str, str]]:
        await wait_until(lambda: len(self.done(kind)) >= count, timeout=timeout,
                         what=f"{count} done {kind} (so far {self.done()})")
        return self.done()

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _wanted_s(pid: int) -> float:
    """Seconds `pid` has run or waited to run (/proc/PID/schedstat: run and run-queue nanoseconds)."""
    run_ns, wait_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return (int(run_ns) + int(wait_ns)) / 1e9


class OwnLoad:
    """A procfs root for the agent (see the module docstring): `stat` with
    the CPU times of cpu0 and cpu1 as the test's pods wanted them, rewritten
    every `every` seconds; `meminfo` the machine's."""

    CPUS = (0, 1)
    HZ = 100  # USER_HZ, the unit of /proc/stat

    def __init__(self, root: Path, procs: list[subprocess.Popen], every: float = 0.05) -> None:
        self.root, self.procs, self.every = root, procs, every
        root.mkdir()
        (root / "meminfo").symlink_to("/proc/meminfo")
        self.busy = dict.fromkeys(self.CPUS, 0.0)
        self.idle = dict.fromkeys(self.CPUS, 0.0)
        self.wanted = {p.pid: self._wanted(p) for p in procs}
        self.at = time.monotonic()
        self._write()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="own-load", daemon=True)
        self._thread.start()

    @staticmethod
    def _wanted(proc: subprocess.Popen) -> float | None:
        try:
            return _wanted_s(proc.pid)
        except (OSError, ValueError):
            return None  # gone

    def _step(self) -> None:
        now = time.monotonic()
        elapsed, self.at = now - self.at, now
        wanted = dict.fromkeys(self.CPUS, 0.0)
        for proc in self.procs:
            was, is_ = self.wanted.get(proc.pid), self._wanted(proc)
            self.wanted[proc.pid] = is_
            if was is None or is_ is None:
                continue
            try:
                cpus = [c for c in allowed_cpus(proc.pid) if c in wanted]
            except (OSError, AssertionError):
                continue
            for cpu in cpus:
                wanted[cpu] += (is_ - was) / len(cpus)
        for cpu in self.CPUS:
            busy = min(max(wanted[cpu], 0.0), elapsed)
            self.busy[cpu] += busy
            self.idle[cpu] += elapsed - busy
        self._write()

    def _write(self) -> None:
        ticks = {c: (round(self.busy[c] * self.HZ), round(self.idle[c] * self.HZ)) for c in self.CPUS}
        lines = [f"cpu  {sum(b for b, _ in ticks.values())} 0 0 {sum(i for _, i in ticks.values())} 0 0 0 0 0 0"]
        lines += [f"cpu{c} {b} 0 0 {i} 0 0 0 0 0 0" for c, (b, i) in ticks.items()]
        staged = self.root / "stat.new"
        staged.write_text("\n".join(lines) + "\n")
        os.replace(staged, self.root / "stat")  # the agent reads a whole file, never half of one

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._step()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(patience(5))


async def test_freeze_then_move_then_thaw_with_a_restart(nats_server, namespace, tmp_path, pods_on_cpu0):
    parent, pods = pods_on_cpu0
    load = OwnLoad(tmp_path / "proc", [proc for _, proc in pods.values()])
    try:
        await _freeze_then_move_then_thaw(nats_server, namespace, tmp_path, parent, pods, load)
    finally:
        load.close()


async def _freeze_then_move_then_thaw(nats_server, namespace, tmp_path, parent, pods, load: OwnLoad) -> None:
    common = dict(bus_url=nats_server.url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1")
    agent = TopologyService(TopologySettings(
        **common, node_name=NODE, numa_override="0:0,1:1", interval_s=0.5, cgroup_root=str(CGROUP),
        procfs_root=str(load.root), cgroup_parent=parent, cgroup_version="v1", state_file=str(tmp_path / "cpus.json"),
        exclusive_cpus=False))
    remediation_settings = RemediationSettings(**common, cool_down_s=1.0, max_actions_per_round=1,
                                               action_timeout_s=10, retry_check_s=1, freeze="enabled",
                                               migrate="enabled")
    remediation = RemediationService(remediation_settings)
    agent_task = await _start(agent)
    remediation_task = await _start(remediation)
    async with make_bus(nats_server.url, namespace) as bus:
        seen = Observer(bus)
        for name, (uid, _) in pods.items():
            await bus.publish(pod(name, phase="running", node=NODE, uid=uid, qos="LS" if name.startswith("ls") else "BE"))

        # 1. NUMA 0 is hot: the best-effort pods are frozen, latency-sensitive ones never
        done = await seen.wait_for("freeze", 2)
        assert {p for k, p in done if k == "freeze"} == {"be-1", "be-2"}
        # 2. two LS pods still saturate cpu0 (1.3 CPUs wanted): one is moved to cpu1, which relieves it
        done = await seen.wait_for("set-cpuset", 1)
        [moved] = [p for k, p in done if k == "set-cpuset"]
        move = next(a for a in seen.actions.values() if a.kind == "set-cpuset")
        assert moved in {"ls-1", "ls-2"} and move.target_numa == 1 and move.measured["load"] > 0.8
        # the agent chose the CPUs: the moved pod's process now runs on cpu1 only
        await wait_until(lambda: allowed_cpus(pods[moved][1].pid) == [1], what="the moved pod on cpu1")
        stayed = ({"ls-1", "ls-2"} - {moved}).pop()

        # 3. restart remediation while the BE pods are frozen: the log tells it who is frozen
        await _stop(remediation, remediation_task)
        remediation = RemediationService(remediation_settings)
        remediation_task = await _start(remediation)
        await wait_until(lambda: remediation.memory_ready.is_set(), what="memory rebuilt")
        assert {f.pod for f in remediation._memory("c1").frozen_on(NODE)} == {"default/be-1", "default/be-2"}

        # 4. the LS pod left on cpu0 finishes: NUMA 0 cools below 0.6 and a frozen pod is thawed
        pods[stayed][1].kill()
        done = await seen.wait_for("thaw", 1)
        thaw = next(a for a in seen.actions.values() if a.kind == "thaw")
        assert thaw.pod in {"default/be-1", "default/be-2"} and thaw.measured["load"] < 0.6
        assert all(a.reason and a.requested_by == "remediation" for a in seen.actions.values())
        await seen.close()
    await _stop(remediation, remediation_task)
    await _stop(agent, agent_task)
