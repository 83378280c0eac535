"""The node agent's core: what it does with each event it reads, on one
node's pod cgroups — independent of the bus and of the machine, so the
service (`service.py`) and every simulated node run the same code.

- a pod lifecycle event updates the pod table (`node_pods.py`) and the
  books (`books.on_pod`);
- a placement decision that counts (`tidal_schemas.fence`) updates the
  books (`books.on_decision`), unless the node offers no exclusive CPUs
  (kubelet may own its cpusets then);
- a bind result updates the books (`books.on_bind_result`);
- `expire` gives back the CPUs of decisions not bound in time;
- on a node serving the GPU device plugin (`devices`, `device_plugin.py`),
  every decision past the fence, pod event and bind result, and the bind
  timeout, go to it as well: it hands containers their decided GPUs;
- an action (freeze, thaw, set-cpuset) for this node is carried out on a
  pod it owns and answered with an `ActionResult`. A set-cpuset is a move
  the books make (`books.move`); the agent chooses the CPUs. Every change
  of the books is written to the cgroups by the CPU authority
  (`authority.py`). An action id seen again (a redelivery, or a re-send
  that crossed the answer) gets the answer it got the first time and is
  not carried out again: a stale freeze redelivered after the pod's thaw
  must not freeze it anew.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from tidal_clock import Clock, now_utc, wall_clock
from tidal_schemas import ActionResult, BindResult, NodeAction, NodeTopology, PlacementDecision, PodLifecycle
from tidal_schemas.fence import DecisionFence

from . import books, checkpoint
from .authority import CpuAuthority, Publish
from .cgroup_tree import CgroupTree
from .node_pods import NodePods, shown

AGENT_ACTIONS = frozenset({"freeze", "thaw", "set-cpuset"})
ANSWERS_KEPT = 4096  # far more than the actions one node is asked between two redeliveries


class DeviceFeed(Protocol):
    """What the agent tells its device plugin (`device_plugin.GpuDevicePlugin`)."""

    def decided(self, decision: PlacementDecision, *, at: float | None = None) -> None: ...
    def pod_seen(self, pod: PodLifecycle) -> None: ...
    def bind_result(self, result: BindResult) -> None: ...
    def expire(self, timeout_s: float, now: float | None = None) -> None: ...


def _decided_at(cause: Any) -> float | None:
    """A decision's time: its event's (placement's clock, the same for every agent), else None (now)."""
    at = getattr(cause, "time", None)
    return at.timestamp() if at is not None else None


class AgentCore:
    """`clock` times the books (bind timeouts); `sample_clock`, the node's usage samples and so the
    `acted_at` of each answer — the same clock on a machine, the scenario's in the simulator."""

    def __init__(self, *, topology: NodeTopology, fs: CgroupTree, state: checkpoint.CpuState | None = None,
                 memory_nodes: frozenset[int], exclusive_cpus: bool, state_file, publish: Publish,
                 clock: Clock = wall_clock, sample_clock: Clock | None = None,
                 on_audit: Callable[[dict[str, int]], None] = lambda c: None,
                 log: logging.Logger | None = None, devices: DeviceFeed | None = None) -> None:
        self.devices = devices
        self.node, self.topology, self.fs, self.exclusive_cpus = topology.node, topology, fs, exclusive_cpus
        self.publish, self.clock, self.sample_clock = publish, clock, sample_clock or clock
        self.log = log or logging.getLogger("tidal.topology")
        self.pods = NodePods(self.node)
        self.fence = DecisionFence()
        self.answers: OrderedDict[str, ActionResult] = OrderedDict()  # action id -> its answer, newest last
        if state is None:
            state = checkpoint.new_state([c.cpu for c in topology.cpus], topology.reserved_cpus)
        self.cpus = CpuAuthority(node=self.node, topology=topology.cpus, state=state, fs=fs,
                                 memory_nodes=memory_nodes, manage_all=exclusive_cpus, state_file=state_file,
                                 publish=publish, live_pods=self.pods.here, on_audit=on_audit, log=self.log)

    async def on_pod(self, pod: PodLifecycle, cause=None) -> None:
        self.pods.apply(pod)
        if self.devices is not None:
            self.devices.pod_seen(pod)
        await self.cpus.change(lambda state: books.on_pod(state, pod, self.node, self.topology.cpus, self.clock(),
                                                          adopt=self.exclusive_cpus), cause=cause)

    async def on_decision(self, decision: PlacementDecision, cause=None, delivery=None) -> None:
        if not self.fence.admit(decision):  # a deposed placement leader's decision: see tidal_schemas.fence
            return
        if self.devices is not None and decision.outcome != "fence":
            self.devices.decided(decision, at=_decided_at(cause))
        if not self.exclusive_cpus or decision.outcome == "fence":
            return  # kubelet may own the cpusets of a node offering no exclusive CPUs: leave them
        await self.cpus.change(lambda state: books.on_decision(
            state, decision, self.node, self.topology.cpus, self.clock(), self.pods.get(decision.event_key())),
            cause=cause, delivery=delivery)

    async def on_bind_result(self, result: BindResult, cause=None) -> None:
        if self.devices is not None:
            self.devices.bind_result(result)
        await self.cpus.change(lambda state: books.on_bind_result(state, result, self.node), cause=cause)

    async def expire(self, timeout_s: float) -> None:
        if self.devices is not None:
            self.devices.expire(timeout_s)
        await self.cpus.change(lambda state: books.expire(state, self.clock(), timeout_s))

    # -- actions --------------------------------------------------------------
    async def on_action(self, action: NodeAction, cause=None, delivery=None) -> ActionResult | None:
        """Carry out an action for this node and publish its result (None: not the agent's)."""
        if action.node != self.node or action.kind not in AGENT_ACTIONS:
            return None
        result = self.answers.get(action.action_id)
        repeated = result is not None
        if result is None:
            status, reason = await self.execute(action)
            result = ActionResult(action_id=action.action_id, node=self.node, kind=action.kind, pod=action.pod,
                                  status=status, reason=reason, acted_at=now_utc(self.sample_clock))
            self._answered(result)
        self.log.info("action %s %s on %s: %s %s%s", shown(action.action_id), action.kind, shown(action.pod),
                      result.status, result.reason, " (answered before: the answer repeated)" if repeated else "")
        await self.publish(result, cause=cause, delivery=delivery)
        return result

    def _answered(self, result: ActionResult) -> None:
        self.answers[result.action_id] = result
        if len(self.answers) > ANSWERS_KEPT:
            self.answers.popitem(last=False)

    async def execute(self, action: NodeAction) -> tuple[str, str]:
        if action.dry_run:
            return "skipped", "dry run"
        # Only pods placed on this node, with a uid of their own, are touched:
        # the action names a pod, never a path.
        pod, refusal, why = self.pods.owned(action.pod)
        if pod is None:
            return refusal or "refused", why
        if action.kind == "freeze" and pod.system_critical:
            return "refused", f"pod {action.pod} is system-critical: never frozen"
        if action.kind == "freeze":
            outcome = await self.cpus.io(self.fs.freeze_pod, pod.uid)
        elif action.kind == "thaw":
            outcome = await self.cpus.io(self.fs.thaw_pod, pod.uid)
        else:
            return await self._move(action, pod)
        return outcome.status, outcome.reason

    async def _move(self, action: NodeAction, pod: PodLifecycle) -> tuple[str, str]:
        """A set-cpuset is a request to the books: the agent chooses the CPUs."""
        if action.target_numa is None:
            return "refused", "name target_numa: the node agent chooses the CPUs, a concrete cpuset is not taken"
        key = pod.event_key()
        async with self.cpus.lock:
            before = self.cpus.state
            step = books.move(before, key, pod.uid, action.target_numa, action.cpu_count, self.topology.cpus)
            if step.refused:
                return "refused", step.refused
            outcome = (await self.cpus.commit(step)).get(pod.uid)
            if outcome is not None and outcome.status == "failed":  # the kernel said no: the books go back
                held = tuple(sorted(before.held_by(key)))
                undo = books.Published(key, held, False, books.numa_counts(self.topology.cpus, held),
                                       before.claims[key].decision_id if key in before.claims else "",
                                       "move undone") if held else None
                await self.cpus.commit(books.Step(before, True, (undo,) if undo else ()))
                return "failed", outcome.reason
        return "done", step.note or "already there"

    def actual_cpusets(self, by_uid: dict[str, PodLifecycle]) -> dict[str, list[int]]:
        """Each pod's cpuset as its cgroup has it (what the kernel enforces,
        including moves made by actions); the agent's own assignment where
        the cgroup cannot be read."""
        found = {pod: sorted(cpus) for (pod, _), cpus in self.cpus.state.assignments.items()}
        for uid, pod in by_uid.items():
            actual = self.fs.pod_cpuset(uid)
            if actual:
                found[pod.event_key()] = actual
        return found
