"""How long a new container of an exclusive pod runs on every CPU before the
node agent pins it, on this machine's real cgroup v1 cpuset hierarchy.

With kubelet's `--cpu-manager-policy=none`, the runtime makes a container's
cgroup with its parent's CPUs: the container may run on every shared CPU
until the agent writes its exclusive cpuset. The window is measured from
the moment the container's cgroup holds every CPU (as the runtime leaves
it) to the moment its `cpuset.cpus` reads the pod's own CPU.

The node agent's own code runs in this process (`AgentCore` over the real
`CgroupFs`, the CPUs declared two NUMA nodes: cpu0 = NUMA 0, cpu1 = NUMA 1),
following the tree as the service does (`cgroup_watch.follow_cgroups`).
A second process plays kubelet and the runtime: for each pod it makes the
pod and container cgroups, then reads the container's `cpuset.cpus` until
it is pinned. Each pod's cgroups are made at a random moment of the scan's
period (the same seeded moments in every mode), as pods arrive in life.
Modes, in turn, one pod at a time:

- `watch`: inotify wakes the agent's scan (the service's default);
- `scan`: the scan every `rescan_s` alone (the agent before the watch;
  the default period, 1 s).

Prints one JSON line: {"pods": N, "rescan_s": s, "modes": {mode: {"p50_ms",
"p99_ms", "max_ms"}}, "scan_over_watch_p50": ratio}.

Run (root, cgroup v1): .venv/bin/python bench/pin_window.py [--pods 100] [--modes watch scan]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import random
import os
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from tidal_schemas import PlacementDecision, PodLifecycle, Resources
from tidal_topology import (AgentCore, CgroupFs, CgroupWatch, TopologySettings, build_node_topology,
                            follow_cgroups, read_topology)

CGROUP = Path("/sys/fs/cgroup")  # the default of --cgroup-root: the machine's own cgroup v1 mount
NODE = "bench-node"
RESCAN_S = TopologySettings.model_fields["rescan_s"].default
EPOCH = "2026-01-01T00:00:00Z"


def kubelet(base: str, requests, answers) -> None:
    """The kubelet and runtime's side, in its own process: for each pod uid
    asked, make its cgroups as they do, then time until the agent pinned the
    container; `None` ends."""
    root = Path(base)
    cpus, mems = (root / "cpuset.cpus").read_text().strip(), (root / "cpuset.mems").read_text().strip()
    while (uid := requests.get()) is not None:
        pod, ctr = root / f"pod{uid}", root / f"pod{uid}" / "ctr"
        for directory in (pod, ctr):
            directory.mkdir()
            (directory / "cpuset.cpus").write_text(cpus)
            (directory / "cpuset.mems").write_text(mems)
        started = time.monotonic()
        while (ctr / "cpuset.cpus").read_text().strip() == cpus:
            time.sleep(0.0001)
        answers.put((time.monotonic() - started, (ctr / "cpuset.cpus").read_text().strip()))
        requests.get()  # the agent has read of the deletion: the cgroups go, as kubelet removes them
        ctr.rmdir()
        pod.rmdir()
        answers.put(None)


def pod_event(i: int, uid: str, phase: str) -> PodLifecycle:
    return PodLifecycle(namespace="bench", name=f"pod-{i}", phase=phase, node=NODE, uid=uid, decision_id=f"d{i}",
                        created_at=EPOCH, requests=Resources(cpu_milli=1000, memory_mib=64), exclusive_cpus=True,
                        numa_cpus={1: 1})


async def run_mode(mode: str, pods: int, base: Path, parent: str, root: Path) -> list[float]:
    machine = read_topology("/sys", {0: 0, 1: 1})
    topology = build_node_topology(machine, NODE, exclusive_cpus=True)

    async def publish(*_args, **_kwargs) -> None:
        return None

    core = AgentCore(topology=topology, fs=CgroupFs(root=root, parent=parent, version="v1"),
                     memory_nodes=frozenset({0}), exclusive_cpus=True, state_file=None, publish=publish)
    core.cpus.live = True
    requests, answers = multiprocessing.Queue(), multiprocessing.Queue()
    child = multiprocessing.Process(target=kubelet, args=(str(base), requests, answers), daemon=True)
    child.start()
    windows: list[float] = []
    loop = asyncio.get_running_loop()
    phases = random.Random(7)
    async with CgroupWatch(base if mode == "watch" else base / "not-watched") as watch:
        follower = asyncio.create_task(follow_cgroups(core.cpus.rescan, watch, RESCAN_S))
        try:
            for i in range(pods):
                uid = str(uuid.uuid4())
                await core.on_decision(PlacementDecision(decision_id=f"d{i}", namespace="bench", name=f"pod-{i}",
                                                         outcome="placed", node=NODE, numa_cpus={1: 1},
                                                         numa_nodes=[1]))
                await core.on_pod(pod_event(i, uid, "running"))
                await asyncio.sleep(phases.uniform(0, RESCAN_S))
                requests.put(uid)
                window, cpus = await loop.run_in_executor(None, answers.get)
                if cpus != "1":
                    raise SystemExit(f"pod {i}: the agent pinned its container to {cpus!r}, not to cpu 1")
                windows.append(window)
                await core.on_pod(pod_event(i, uid, "deleted"))
                requests.put("gone")
                await loop.run_in_executor(None, answers.get)
        finally:
            follower.cancel()
            requests.put(None)
            child.join(10)
    return windows


def make_parent(root: Path) -> tuple[Path, str]:
    if not (root / "cpuset" / "cpuset.cpus").exists():
        raise SystemExit("bench/pin_window.py: needs a cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset")
    if os.cpu_count() is None or os.cpu_count() < 2:
        raise SystemExit("bench/pin_window.py: needs two CPUs (one shared, one exclusive)")
    parent = f"tidal-pin-bench-{uuid.uuid4().hex[:8]}"
    base = root / "cpuset" / parent
    base.mkdir()
    for name in ("cpuset.cpus", "cpuset.mems"):
        (base / name).write_text((root / "cpuset" / name).read_text())
    return base, parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100, help="pods started and deleted one after the other, per mode")
    parser.add_argument("--modes", nargs="+", choices=("watch", "scan"), default=["watch", "scan"])
    parser.add_argument("--cgroup-root", type=Path, default=CGROUP, help="the cgroup v1 mount (its cpuset controller)")
    args = parser.parse_args(argv)
    # the agent's node audit warns of a claim read before its pod's event, as in every agent: not the figure here
    logging.getLogger("tidal.topology").setLevel(logging.ERROR)
    base, parent = make_parent(args.cgroup_root)
    try:
        result = {}
        for mode in args.modes:
            ms = np.array(asyncio.run(run_mode(mode, args.pods, base, parent, args.cgroup_root))) * 1000
            result[mode] = {"p50_ms": round(float(np.percentile(ms, 50)), 2),
                            "p99_ms": round(float(np.percentile(ms, 99)), 2), "max_ms": round(float(ms.max()), 2)}
    finally:
        base.rmdir()
    out = {"pods": args.pods, "rescan_s": RESCAN_S, "modes": result}
    if {"watch", "scan"} <= result.keys():
        out["scan_over_watch_p50"] = round(result["scan"]["p50_ms"] / max(result["watch"]["p50_ms"], 1e-3), 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
