"""A physical GPU and its slices (MIG, vGPU) are one budget in placement's
cache: a whole GPU is never given while a slice of it is held, slices never
take more than their parent has left, and one pod never gets a physical
GPU and one of its slices together. Table-driven over the cache, then end
to end: the real node agent reads a GPU inventory file and publishes it,
the real placement decides, over a real NATS server.

Node: gpu0 (40 GiB) with slices mig0 (10 GiB: weight 1000·10/40 = 250) and
mig1 (20 GiB: weight 500), and gpu1 (40 GiB, no slices)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import pod
from conftest import make_bus, patience, start_service, wait_until
from test_topology_authority_real import own_bus, start_placement, stop_own
from tidal_bus import StartAt
from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_placement.decide import PodRequest, decide
from tidal_placement.device_budget import (device_free, distinct_roots, node_gpu_figures, one_per_root,
                                           roots_and_weights)
from tidal_placement.gpu_strategies import make_strategy
from tidal_schemas import Gpu, GpuAsk
from tidal_simulator.topology_builder import make_topology
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

GIB = 1024
DEVICES = [
    Gpu(id="gpu0", index=0, model="A100", memory_mib=40 * GIB),
    Gpu(id="mig0", index=0, model="A100", kind="virtual", parent="gpu0", memory_mib=10 * GIB),
    Gpu(id="mig1", index=0, model="A100", kind="virtual", parent="gpu0", memory_mib=20 * GIB),
    Gpu(id="gpu1", index=1, model="A100", memory_mib=40 * GIB),
]


def node_with(gpus=DEVICES, name="n1"):
    return make_topology(name, (8,)).model_copy(update={"gpus": list(gpus)})


def cache(held: dict[str, int]) -> ClusterState:
    state = ClusterState()
    state.upsert_node(node_with())
    for i, (gpu, milli) in enumerate(held.items()):
        assert state.record(f"held/{i}", Allocation.of("n1", 100, gpus={gpu: milli})).ok
    return state


def ask(count=1, milli=1000, kind=None) -> PodRequest:
    return PodRequest("p", 1000, gpu_count=count, gpu_milli=milli, gpu_kind=kind)


CASES = [
    # (held before, the ask, GPUs given — None: refused)
    ("two whole GPUs: two physical ones, never gpu0 and its slice", {}, ask(2), {"gpu0": 1000, "gpu1": 1000}),
    ("three whole GPUs: the node has two physical ones", {}, ask(3), None),
    ("a slice held: a whole physical GPU is the other one", {"mig0": 1000}, ask(kind="physical"), {"gpu1": 1000}),
    ("a slice held and gpu1 busy: no whole physical GPU", {"mig0": 1000, "gpu1": 1000}, ask(kind="physical"), None),
    ("a slice held: two whole GPUs are gpu1 and the other slice", {"mig0": 1000}, ask(2),
     {"gpu1": 1000, "mig1": 1000}),
    ("… but never gpu0 with a slice of it", {"gpu1": 1000}, ask(2), None),
    ("the physical GPU held whole: none of its slices", {"gpu0": 1000}, ask(kind="virtual"), None),
    # load(gpu0) = 600 + 250 (mig0 whole) = 850: 150 left = 150·1000/500 = 300 of mig1
    ("a share of the parent leaves a slice only its part", {"gpu0": 600, "mig0": 1000}, ask(kind="virtual"), None),
    ("… which a smaller share still fits", {"gpu0": 600, "mig0": 1000}, ask(milli=300, kind="virtual"),
     {"mig1": 300}),
    # both slices whole: load(gpu0) = 250 + 500 = 750, 250 left
    ("slices never exceed their parent", {"mig0": 1000, "mig1": 1000, "gpu1": 1000}, ask(milli=300, kind="physical"),
     None),
    ("… the parent keeps what they leave", {"mig0": 1000, "mig1": 1000, "gpu1": 1000},
     ask(milli=250, kind="physical"), {"gpu0": 250}),
]


@pytest.mark.parametrize("held, request_, given", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_physical_gpu_and_its_slices_are_one_budget(held, request_, given):
    state = cache(held)
    choice = decide(state, request_, make_strategy("best-fit"))
    assert (dict(choice.allocation.gpus) if choice.ok else None) == given, choice.reason
    if given is None:
        assert choice.filtered.get("gpu") == 1


def test_the_cache_refuses_what_the_budget_does_not_hold():
    state = cache({"mig0": 1000})
    # gpu0 has 1000 − 250 = 750 left
    refused = state.assume("x", Allocation.of("n1", 100, gpus={"gpu0": 1000}))
    assert not refused.ok and "GPU gpu0: asks 1000 milli, 750 free" in refused.reason
    assert state.free_by_node()["n1"]["gpu_milli"] == {"gpu0": 750, "mig0": 0, "mig1": 1000, "gpu1": 1000}
    assert int(state.gpu_idle[state.rows["n1"]]) == 750 + 1000  # physical GPUs only: slices are part of gpu0
    assert int(state.gpu_whole[state.rows["n1"]]) == 2  # gpu0 through its free slice mig1, and gpu1
    state.release("held/0")
    assert state.free_by_node()["n1"]["gpu_milli"]["gpu0"] == 1000


def test_an_unhealthy_physical_gpu_takes_its_slices_down():
    gpus = [DEVICES[0].model_copy(update={"healthy": False}), *DEVICES[1:]]
    state = ClusterState()
    state.upsert_node(node_with(gpus))
    assert state.free_by_node()["n1"]["gpu_milli"] == {"gpu0": 0, "mig0": 0, "mig1": 0, "gpu1": 1000}


def test_weights_come_from_memory_else_an_even_split():
    roots, weights = roots_and_weights(["p", "a", "b", "q", "c"], [None, "p", "p", None, "q"], [40, 10, 0, 0, 0])
    # a: 1000·10/40; b: p's memory known but b's not: even split over p's two slices; c: even over q's one
    assert roots == (0, 0, 0, 3, 3) and weights == (1000, 250, 500, 1000, 1000)


def test_the_budget_arithmetic():
    root, weight = np.array([0, 0, 0, 3]), np.array([1000, 250, 500, 1000])
    valid = np.ones(4, dtype=bool)
    # mig0 holds 600: load(gpu0) = ⌈250·600/1000⌉ = 150; mig1: min(1000, 850·1000/500) = 1000
    assert device_free(np.array([0, 600, 0, 0]), valid, root, weight).tolist() == [850, 400, 1000, 1000]
    mask = np.array([[True, True, True, False], [True, False, False, True]])
    assert distinct_roots(mask, np.array([root, root])).tolist() == [1, 2]
    assert one_per_root([0, 1, 3], root, 2) == [0, 3] and one_per_root([1, 2], root, 2) == []


def _budget_by_hand(used, valid, root, weight):
    # the module docstring's formulas, device by device
    root = [j if r < 0 else r for j, r in enumerate(root)]
    load = {p: used[p] + sum(-(-weight[k] * used[k] // 1000) for k in range(len(root)) if root[k] == p != k)
            for p in set(root)}
    free = []
    for k, p in enumerate(root):
        left = 1000 - load[p]
        value = left if p == k else min(1000 - used[k], left * 1000 // max(weight[k], 1))
        free.append(max(value, 0) if valid[k] and valid[p] else 0)
    return free


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_budget_is_its_formulas_with_and_without_slices(data):
    # device_free, distinct_roots and node_gpu_figures shortcut nodes without slices: still the formulas
    n = data.draw(st.integers(1, 8))
    sliced = data.draw(st.booleans())
    root = [data.draw(st.sampled_from([j, -1] + (list(range(j)) if sliced else []))) for j in range(n)]
    root = [r if r < 0 or root[r] in (r, -1) else j for j, r in enumerate(root)]  # a slice's parent is physical
    root = [j if r == -1 and j < n - 1 else r for j, r in enumerate(root)]  # padding only at the end
    weight = [1000 if r in (j, -1) else data.draw(st.integers(1, 1000)) for j, r in enumerate(root)]
    used = [data.draw(st.integers(0, 1000)) for _ in range(n)]
    valid = [data.draw(st.booleans()) for _ in range(n)]
    free = device_free(np.array(used), np.array(valid), np.array(root), np.array(weight))
    assert free.tolist() == _budget_by_hand(used, valid, root, weight)
    physical = [j if r < 0 else r for j, r in enumerate(root)]
    idle = sum(f for j, f in enumerate(free.tolist()) if physical[j] == j)
    whole = len({physical[j] for j, f in enumerate(free.tolist()) if f == 1000})
    has_slices = any(physical[j] != j for j in range(n))
    for hint in (None, has_slices):  # the cache tells whether a row has slices; without, they are read from root
        figures = node_gpu_figures(np.array(used), np.array(valid), np.array(root), np.array(weight), sliced=hint)
        assert (list(figures[0]), *figures[1:]) == (free.tolist(), idle, whole, max(free.tolist()))
    masks = np.array([[data.draw(st.booleans()) for _ in range(n)] for _ in range(3)])
    expected = [len({physical[j] for j in range(n) if row[j]}) for row in masks]
    assert distinct_roots(masks, np.array([root] * 3)).tolist() == expected


# ---------------------------------------------------------------- end to end

async def _decision(bus, name: str, outcome: str, timeout: float = 20):
    async def find():
        while True:
            async for _, event in bus.read("placement.decision", StartAt.earliest()):
                for d in event.payload.items:
                    if d.name == name and d.outcome == outcome:
                        return d
            await asyncio.sleep(0.1)
    return await asyncio.wait_for(find(), patience(timeout))


async def test_placement_never_gives_a_slice_and_its_physical_gpu_end_to_end(nats_server, namespace, tmp_path):
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps([g.model_dump(exclude={"index"}) for g in DEVICES[:3]]))  # gpu0, mig0, mig1
    common = dict(bus_url=nats_server.url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1")
    agent = TopologyService(TopologySettings(**common, node_name="gpu-node", numa_override="0:0,1:1",
                                             gpu_inventory_file=str(inventory), cgroup_parent="tidal-none",
                                             state_file=str(tmp_path / "cpu-state.json"), drain_timeout_s=2),
                            bus=await own_bus(nats_server.url, namespace, "topology"))
    agent_task = await start_service(agent)
    placement, placement_task = await start_placement(nats_server.url, namespace)
    await wait_until(lambda: "c1" in placement.clusters and "gpu-node" in placement.clusters["c1"].state.rows,
                     timeout=20, what="placement knows the node")
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(pod("slice", cpu_milli=100, memory_mib=64, gpu=GpuAsk(count=1, kind="virtual")))
        placed = await _decision(bus, "slice", "placed")
        assert [g.gpu for g in placed.gpus] in (["mig0"], ["mig1"])
        # gpu0 is partly given through its slice: a pod asking a whole physical GPU waits
        await bus.publish(pod("whole", cpu_milli=100, memory_mib=64, gpu=GpuAsk(count=1, kind="physical")))
        waiting = await _decision(bus, "whole", "pending")
        assert "gpu" in waiting.filtered, waiting.reason
        assert not [d for d in placement.requested_names() if d.name == "whole"]
    await stop_own(placement, placement_task)
    await stop_own(agent, agent_task)
