"""The pods running since before a simulation starts: placed earlier, so
each carries its decision as the bridge wrote it then, and the node agents
take them up from what the bridge reads of them — as an agent restarted on
a busy node does."""

from __future__ import annotations

import asyncio

from tidal_bus import StartAt
from tidal_clock import elapsed
from tidal_schemas import PlacementDecision, SchemaError
from tidal_schemas.decision_codec import write_decision

from .pods import pod_manifest


async def start_placed(sim, spec) -> None:
    """Create pod `spec` running on its node (GPUs and exclusive CPUs as
    `ClusterModel.place` chose them); a pod pinned to a NUMA node is pinned
    by its node's agent, as a move (to one NUMA node)."""
    numa_cpus, gpus, problem = sim.model.place(spec.key, spec.node, sim.clock.now(), 0.0)
    if problem:
        raise ValueError(f"cannot start pre-placed pod: {problem}")
    pod = spec.pod
    earlier = PlacementDecision(decision_id=f"before-start-{pod.uid[:8]}", namespace=pod.namespace,
                                name=pod.name, uid=pod.uid, outcome="placed", node=spec.node,
                                numa_cpus=numa_cpus, gpus=list(gpus))
    manifest = pod_manifest(pod, sim.clock.now(), node=spec.node, phase="Running", annotations=write_decision(earlier))
    sim.kubelets.adopt(spec.key, spec.node, manifest, tuple((g.gpu, g.milli) for g in gpus), earlier.decision_id)
    sim.api.create_pod(manifest)
    sim.record.happen(0.0, "placed", spec.node, spec.key, "running at start")
    for numa in spec.pin_numa[:1]:
        refused = await sim.agents.pin(spec.node, spec.key, pod.uid, numa)
        if refused:
            raise ValueError(f"cannot pin pre-placed pod {spec.key} to NUMA node {numa}: {refused}")


async def read_fences(sim) -> None:
    """Give the node agents placement's fences of this cluster from before
    the start (an agent reads the decision log from its beginning; the
    simulator follows it from its start): without the latest, an agent
    would take every decision of the current leader for a deposed one's."""
    async for _, event in sim.bus.read("placement.decision", StartAt.earliest()):
        if not isinstance(event, SchemaError) and event.cluster == sim.settings.cluster:
            for decision in event.payload.items:
                if decision.outcome == "fence":
                    await sim.agents.on_decision(decision)


async def caught_up(sim, timeout_s: float = 60.0) -> bool:
    """Wait until each node's agent has read of the pods running there since
    the start (the bridge publishes them once it is connected), so that it
    adopts their CPUs before any new decision; False (and a warning) after
    `timeout_s`."""
    placed = [(s.node, s.key) for s in sim.workload.pods if s.node is not None]
    deadline = elapsed() + timeout_s
    while True:
        missing = [key for node, key in placed if not sim.agents.knows(node, key)]
        if not missing:
            return True
        if elapsed() > deadline:
            sim.log.warning("the node agents have not read of %d pod(s) running since the start, e.g. %s",
                            len(missing), missing[0])
            return False
        await asyncio.sleep(0.05)
