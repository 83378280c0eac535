"""The tenant usage a cache keeps as holdings change equals the rule
computed from every pod held (`tenancy.tenant_usage` of `holdings()`),
after any sequence of what changes it: pods arriving, bound (by Tidal or
another scheduler), changing tenant, deleted; decisions assumed,
forgotten, released; a GPU's model changing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import pod
from tidal_placement.allocation import Allocation
from tidal_placement.cache import ClusterCache
from tidal_placement.tenancy import tenant_usage
from tidal_schemas import GpuShare
from tidal_simulator.topology_builder import make_topology

NODES, PODS, TENANTS, MODELS = 2, 4, 2, ("A100", "T4")

topology = st.tuples(st.just("topology"), st.integers(0, NODES - 1), st.integers(0, len(MODELS) - 1))
pod_event = st.tuples(st.just("pod"), st.integers(0, PODS - 1), st.integers(0, TENANTS - 1),
                      st.sampled_from(["pending", "running", "deleted"]), st.booleans(),
                      st.integers(0, NODES - 1), st.sampled_from([0, 1000]))
assume = st.tuples(st.just("assume"), st.integers(0, PODS - 1), st.integers(0, NODES - 1),
                   st.sampled_from([0, 500, 1000]))
undo = st.tuples(st.sampled_from(["forget", "release"]), st.integers(0, PODS - 1))


def apply(cache: ClusterCache, step: tuple) -> None:
    kind = step[0]
    if kind == "topology":
        _, n, m = step
        cache.apply(make_topology(f"n{n}", (4, 4), gpus=2, model=MODELS[m]), 0.0)
    elif kind == "pod":
        _, p, t, phase, foreign, n, milli = step
        bound = phase == "running"
        cache.apply(pod(f"p{p}", phase=phase, tenant=f"t{t}", uid=f"u{p}", foreign=foreign and bound,
                        node=f"n{n}" if bound else None, cpu_milli=500,
                        gpus=[GpuShare(gpu="gpu1", milli=milli)] if bound and milli else []), 0.0)
    elif kind == "assume":
        _, p, n, milli = step
        cache.state.assume(f"default/p{p}", Allocation.of(f"n{n}", 700, 256, gpus={"gpu0": milli}))
    else:
        _, p = step
        getattr(cache.state, kind)(f"default/p{p}")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(topology, pod_event, assume, undo), max_size=40))
def test_the_kept_usage_is_the_usage_of_every_pod_held(steps):
    cache = ClusterCache("c1", 30.0, 0.0)
    for step in steps:
        apply(cache, step)
        assert cache.tenant_usage() == tenant_usage(cache.holdings(), cache.gpu_model), step


def test_a_pod_charges_its_tenant_until_it_is_gone():
    cache = ClusterCache("c1", 30.0, 0.0)
    apply(cache, ("topology", 0, 0))
    apply(cache, ("pod", 1, 0, "running", False, 0, 1000))
    assert cache.tenant_usage() == {"t0": {"cpu": 500, "memory": 512, "A100": 1000, "gpu": 1000}}
    apply(cache, ("pod", 1, 1, "running", False, 0, 1000))  # the same holding, now of another tenant
    assert cache.tenant_usage() == {"t1": {"cpu": 500, "memory": 512, "A100": 1000, "gpu": 1000}}
    apply(cache, ("topology", 0, 1))  # the GPU is a T4 after all
    assert cache.tenant_usage() == {"t1": {"cpu": 500, "memory": 512, "T4": 1000, "gpu": 1000}}
    apply(cache, ("pod", 1, 1, "deleted", False, 0, 0))
    assert cache.tenant_usage() == {}
