"""Checks of a finished simulated run through the machines themselves: the
node agents' books and the cgroup trees they wrote."""

from __future__ import annotations


def pinning_problems(sim) -> list[str]:
    """Every running pod whose cgroup breaks the exclusive-CPU rule: a pod
    its node's agent gives exclusive CPUs must be pinned to exactly them,
    and no other pod may run on any of them; a pod with no cgroup is one
    too. Empty when all is well."""
    problems = []
    for node, tree in sorted(sim.model.cgroups.items()):
        pods = [p for p in sim.model.running_on(node)]
        held = {p.key: set(sim.agents.held(node, p.key)) for p in pods}
        exclusive = set().union(*held.values()) if held else set()
        for pod in pods:
            cpus = tree.pod_cpuset(pod.request.uid)
            if cpus is None:
                problems.append(f"{node} {pod.key}: no cgroup")
            elif held[pod.key] and set(cpus) != held[pod.key]:
                problems.append(f"{node} {pod.key}: runs on {sorted(cpus)}, holds {sorted(held[pod.key])}")
            elif not held[pod.key] and set(cpus) & exclusive:
                problems.append(f"{node} {pod.key}: shared pod on exclusive CPUs {sorted(set(cpus) & exclusive)}")
    return problems
