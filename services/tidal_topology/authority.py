"""The node's CPU authority: the books (`books.py`) wired to the machine.

Every change is kept in this order: checkpoint, `cpu.assignment` events,
then every pod cgroup is pinned as `cpuset_plan` says (pods leaving the
shared pool's CPUs before an exclusive pod gets them), then the node is
audited (`audit.py`) and violations are logged. One lock serialises
changes, so a change never interleaves with another's cgroup writes.
Independent of the service around it (publishing is a callable) and of
the machine (the pod cgroups are a `cgroup_tree.CgroupTree`), so a
simulated node runs the same code on a cgroup tree kept in memory, with no
checkpoint file (`state_file` None).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from tidal_schemas import CpuAssignment, PodLifecycle

from . import cgroups
from .audit import Violation, audit, counts
from .books import Step
from .cgroup_tree import CgroupTree
from .checkpoint import CpuState, save_state
from tidal_policy.cpu_pick import CpuLike
from .cpuset_plan import expected_cpusets

Publish = Callable[..., Awaitable[Any]]  # publish(payload, cause=, delivery=, discriminator=), as Service.publish


class CpuAuthority:
    def __init__(self, *, node: str, topology: Sequence[CpuLike], state: CpuState, fs: CgroupTree,
                 memory_nodes: frozenset[int], manage_all: bool, state_file: str | Path | None, publish: Publish,
                 live_pods: Callable[[], list[PodLifecycle]],
                 on_audit: Callable[[dict[str, int]], None] = lambda c: None,
                 log: logging.Logger | None = None) -> None:
        self.node, self.topology, self.state, self.fs = node, list(topology), state, fs
        self.numa_of = {c.cpu: c.numa for c in self.topology}
        self.memory_nodes, self.manage_all, self.state_file = memory_nodes, manage_all, state_file
        self.publish, self.live_pods, self.on_audit = publish, live_pods, on_audit
        self.log = log or logging.getLogger("tidal.topology")
        self.lock = asyncio.Lock()
        self.live = False  # cgroups are written once the pod table has caught up
        self.seen: dict[str, frozenset[str]] = {}  # uid -> container cgroups, at the last pass
        self.violations: list[Violation] = []

    async def io(self, call: Callable[..., Any], *args: Any) -> Any:
        """`call` on the cgroup tree: in a worker thread when it waits on a filesystem."""
        return await asyncio.to_thread(call, *args) if self.fs.blocking else call(*args)

    async def change(self, make: Callable[[CpuState], Step], **cause: Any) -> Step:
        """Compute a step from the current books and keep it."""
        async with self.lock:
            step = make(self.state)
            await self.commit(step, **cause)
            return step

    async def commit(self, step: Step, *, cause=None, delivery=None) -> dict[str, cgroups.Outcome]:
        """Keep `step` (the caller holds `lock`); the outcome of each cgroup written."""
        if step.refused:
            self.log.error("%s", step.refused)
        if step.note:
            self.log.info("%s", step.note)
        if not step.changed:
            return {}
        self.state = step.state
        if self.state_file is not None:
            await asyncio.to_thread(save_state, self.state, self.state_file)
        for c in step.changes:
            # One cause (an event of many decisions, a decision replacing another) may change several
            # pods' CPUs, all keyed by this node: each output's id must differ, or the broker keeps one.
            await self.publish(CpuAssignment(node=self.node, pod=c.pod, cpuset=list(c.cpus), released=c.released,
                                             numa_cpus=dict(c.numa_cpus), decision_id=c.decision_id,
                                             reason=c.reason[:1024]), cause=cause, delivery=delivery,
                               discriminator=f"{c.pod}/{c.decision_id}/{'released' if c.released else 'taken'}")
        if self.live and not (delivery is not None and delivery.replaying):
            return await self.apply()
        return {}

    async def apply(self) -> dict[str, cgroups.Outcome]:
        """Pin every pod cgroup whose cpuset (or set of containers) is not as
        expected, then audit. The caller holds `lock`."""
        found = await self.io(self.fs.scan_pod_cpusets)
        expected = expected_cpusets(self.state, found, self.numa_of, self.memory_nodes, self.manage_all)
        exclusive_last = sorted(expected.items(), key=lambda kv: (bool(self.state.held_by(kv[1].pod)), kv[0]))
        outcomes = {}
        for uid, pin in exclusive_last:
            if not pin.cpus:
                self.log.error("pod cgroup %s: no shared CPU is left to run it on (keep reserved CPUs, as "
                               "kubelet does)", uid)
                continue
            if found[uid].cpus == pin.cpus and self.seen.get(uid) == found[uid].children:
                continue
            outcome = await self.io(self.fs.set_pod_cpuset, uid, pin.cpus, pin.mems)
            outcomes[uid] = outcome
            if outcome.status not in ("done", "unknown-pod"):  # unknown: gone meanwhile
                self.log.warning("pod %s (uid %s): cpuset %s not applied: %s", pin.pod or "?", uid, pin.cpus,
                                 outcome.reason)
        self.seen = {uid: p.children for uid, p in found.items()}
        await self.audit()
        return outcomes

    async def rescan(self) -> None:
        """Apply when a pod or container cgroup appeared or went since the last pass."""
        found = await self.io(self.fs.scan_pod_cpusets)
        if {uid: p.children for uid, p in found.items()} != self.seen:
            async with self.lock:
                await self.apply()

    async def audit(self) -> list[Violation]:
        """Audit the node now; log the violations when they changed."""
        found = await self.io(self.fs.scan_pod_cpusets)
        actual = {uid: p.cpus for uid, p in found.items() if p.cpus is not None}
        expected = expected_cpusets(self.state, actual, self.numa_of, self.memory_nodes, self.manage_all)
        live = self.live_pods()
        violations = audit(self.state, expected, actual, {p.event_key() for p in live},
                           names={p.uid: p.event_key() for p in live if p.uid})
        if violations != self.violations:
            for v in violations:
                self.log.warning("node audit: %s %s: %s", v.kind, v.pod, v.detail)
            if not violations:
                self.log.info("node audit: no violation")
        self.violations = violations
        self.on_audit(counts(violations))
        return violations
