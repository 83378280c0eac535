"""Small builders for placement's rule tests: a cache of a few nodes, some of
them partly used, and the figures a test compares.

    state = cluster(node("a", numa=(4, 4), gpus=2), loads={"a": {0: 0.3, 1: 0.1}})
    use(state, "a", cpu=3000, numa={0: 3}, gpus={"gpu0": 600})   # a partly used node
"""

from __future__ import annotations

from collections.abc import Mapping

from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_simulator.topology_builder import make_topology

node = make_topology  # node(name, numa_cpus=(8,), *, gpus=0, model="A100", virtual=0, memory_mib=65536, exclusive=True)


def cluster(*topologies, loads: Mapping[str, Mapping[int, float]] | None = None) -> ClusterState:
    """A cache holding `topologies`, with NUMA loads per node name."""
    state = ClusterState(capacity=4)
    for t in topologies:
        state.upsert_node(t)
    for name, numa in (loads or {}).items():
        state.update_load(name, numa)
    return state


_used = 0


def use(state: ClusterState, name: str, cpu: int = 0, mem: int = 0, numa: Mapping[int, int] | None = None,
        gpus: Mapping[str, int] | None = None) -> str:
    """Make `name` partly used: a pod assumed there holding what is given
    (it must fit); its key."""
    global _used
    _used += 1
    key = f"default/used-{_used}"
    outcome = state.assume(key, Allocation.of(name, cpu, mem, numa, gpus))
    assert outcome.ok, outcome.reason
    return key


def free(state: ClusterState, name: str) -> dict:
    """A node's free figures: node CPU and memory, exclusive CPUs per NUMA, milli per GPU."""
    r = state.rows[name]
    n, g = int(state.numa_count[r]), len(state.specs[r].gpu_ids)
    return {"cpu": int(state.cpu_free[r]), "mem": int(state.mem_free[r]),
            "numa": state.numa_free[r, :n].tolist(), "gpu": state.gpu_free[r, :g].tolist()}
