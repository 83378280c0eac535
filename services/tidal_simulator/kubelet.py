"""The simulated kubelets, KWOK-style: they follow the API server and play
every node's kubelet (with its device plugin and node agent) over the model.

- A binding is admitted or refused at the API server (`admit`): the pod
  starts on its node in the model as the decision written on it says (GPUs,
  exclusive CPUs from the node's agent), or the binding is refused with the
  reason (a failed bind for the bridge to report and roll back). Admission
  reserves at once, so two bindings in a row are never both admitted into
  the same room.
- A bound pod is then marked Running (status.phase, startTime, Ready).
- A deleted pod (finished, evicted, or deleted by anyone) leaves its node.
- A node's taints, as the bridge patched them, are the node's taints.
- A pod whose run time is over is deleted (`finish`).

`observe` runs inside the API server's write (no awaits); what needs the
bus or another write is queued for `run`.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tidal_schemas import CpuAssignment
from tidal_schemas.decision_codec import read_decision

from .kube_api.protocol import stamp


class Kubelets:
    def __init__(self, sim) -> None:
        self.sim = sim
        self.queue: asyncio.Queue = asyncio.Queue()
        self.idle = asyncio.Event()
        self.idle.set()

    # -- in the API server's hands ------------------------------------------------
    def admit(self, pod: dict[str, Any], node: str) -> str | None:
        """The binding of `pod` to `node`: None when the pod now runs there
        (in the model), else why not."""
        sim, meta = self.sim, pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if key not in sim.model.pods:
            return None  # not a pod of this simulation: nothing to model
        rate = sim.settings.bind_failure_rate
        if rate and sim.bind_rng.random() < rate:
            return f"injected bind failure (rate {rate:g})"
        held, unread = read_decision(meta.get("annotations"))
        problem = unread or sim.model.admission(key, node, held)
        if problem is None:
            assigned, problem = sim.model.start(key, node, held, sim.clock.now(), sim.clock.t_s)
            if not problem:
                sim.record.happen(sim.clock.t_s, "placed", node, key)
                sim.changed(node)
                self._later("started", key, node, assigned)
                return None
        sim.record.happen(sim.clock.t_s, "refused", node, key, problem)
        return problem

    def observe(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        """A write in the API server (see the module docstring)."""
        sim, meta = self.sim, obj["metadata"]
        if resource == "nodes" and kind == "MODIFIED":
            node = meta["name"]
            keys = sorted({t.get("key", "") for t in (obj.get("spec") or {}).get("taints") or []})
            added, removed = sim.model.set_taints(node, keys)
            for kind_, keys_ in (("taint", added), ("untaint", removed)):
                for taint in sorted(keys_):
                    sim.record.happen(sim.clock.t_s, kind_, node, None, taint, sim.asked_by(kind_, node, None))
            return
        if resource != "pods" or kind != "DELETED":
            return
        key = f"{meta['namespace']}/{meta['name']}"
        pod = sim.model.pods.get(key)
        if pod is None or pod.phase in ("waiting", "deleted"):
            return
        node, was_running = pod.node, pod.phase == "running"
        # The eviction endpoint records the eviction, then deletes: this call is that deletion.
        evicted = (meta["namespace"], meta["name"]) in sim.api.evictions[-1:]
        released = sim.model.delete(key)
        if evicted:
            sim.record.happen(sim.clock.t_s, "evict", node, key, "", sim.asked_by("evict", node, key))
        if was_running:
            sim.record.happen(sim.clock.t_s, "deleted", node, key, "evicted" if evicted else "deleted")
            sim.changed(node)
        if released:
            self._later("released", key, node, released)

    def finish(self, keys: list[str]) -> None:
        """Pods whose run time is over: their containers exit, the pods are deleted."""
        for key in keys:
            namespace, name = key.split("/", 1)
            if self.sim.api.pod(namespace, name) is not None:
                self.sim.api.delete_pod(namespace, name)

    def assigned(self, key: str, node: str, cpus: tuple[int, ...]) -> None:
        """A pod running since before the start holds `cpus`: say so."""
        if cpus:
            self._later("assigned", key, node, cpus)

    # -- on the event loop ---------------------------------------------------------
    def _later(self, *work: Any) -> None:
        self.idle.clear()
        self.queue.put_nowait(work)

    async def run(self) -> None:
        """Carry out what `admit` and `observe` queued, in order."""
        while True:
            what, key, node, cpus = await self.queue.get()
            if what == "started":
                self._running(key)
            if what in ("started", "assigned") and cpus:
                await self.sim.emit(CpuAssignment(node=node, pod=key, cpuset=list(cpus)))
            if what == "started":
                self.sim.settle(key, "running")
            elif what == "released":
                await self.sim.emit(CpuAssignment(node=node, pod=key, cpuset=list(cpus), released=True))
            if self.queue.empty():
                self.idle.set()

    def _running(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        if self.sim.api.pod(namespace, name) is None:
            return  # deleted before its kubelet got to it

        def running(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            now = stamp(self.sim.clock.now())
            status.update(phase="Running", startTime=now)
            status["conditions"] = [c for c in copy.deepcopy(status.get("conditions") or [])
                                    if c.get("type") not in ("Ready", "ContainersReady")]
            status["conditions"] += [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
        self.sim.api.update_pod(namespace, name, running)
