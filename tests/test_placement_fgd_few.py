"""FGD's scores of a few node states in plain Python (`gpu_fgd_few`) are the
vectorised strategy's own: cost, device and tiebreaks compared on random
node states and pod shapes, for `fgd` and `fgd-cpu` against the openb
target, also after scoring the same nodes with their devices in another
order (what is remembered per multiset of devices serves them); a score
within a rounding of FGD's steps is left to the vectorised strategy; and
on an openb replay the score cache takes the plain path for most of the
states it scores."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal_placement.cluster_state import ClusterState
from tidal_placement.decide import decide
from tidal_placement.gpu_candidates import Candidates
from tidal_placement.gpu_fgd_few import MARGIN, step
from tidal_placement.gpu_score_cache import ScoreCache
from tidal_placement.gpu_strategies import make_strategy
from tidal_placement.gpu_workload import Shape, typical_workload
from tidal_simulator.openb import pod_request, read_nodes, read_pods
from tidal_simulator.openb_replay import arrival_sequence, load_cluster

OPENB = Path(__file__).resolve().parents[1] / "data" / "openb"
NODES = read_nodes(OPENB / "openb_node_list_gpu_node.csv")
PODS = read_pods(OPENB / "openb_pod_list_default.csv")
WORKLOAD = typical_workload([p.shape for p in PODS])
MODELS = tuple(sorted({n.model for n in NODES if n.gpus}))
COLS = 8

# milli left per device: the values a real node sees most (whole, empty, the
# openb shares' remainders) and any other
FREE = st.one_of(st.sampled_from([0, 1000, 500, 250, 750, 100, 900]), st.integers(0, 1000))
CPU_SHAPES = sorted({p.shape.cpu_milli for p in PODS})


@st.composite
def node_states(draw) -> dict:
    gpus = draw(st.integers(0, COLS))
    free = [draw(FREE) for _ in range(gpus)] + [0] * (COLS - gpus)
    valid = [g < gpus and draw(st.booleans() | st.just(True)) for g in range(COLS)]
    return dict(cpu_free=draw(st.one_of(st.sampled_from(CPU_SHAPES), st.integers(0, 128_000))),
                gpu_free=free, gpu_valid=valid, gpu_model=draw(st.integers(0, len(MODELS) - 1)) if gpus else -1,
                gpu_idle=sum(f for f, v in zip(free, valid) if v))


@st.composite
def shapes(draw) -> Shape:
    cpu = draw(st.one_of(st.sampled_from(CPU_SHAPES), st.integers(0, 64_000)))
    models = tuple(draw(st.lists(st.sampled_from(MODELS), max_size=2, unique=True)))
    kind = draw(st.sampled_from(["cpu", "share", "whole"]))
    if kind == "cpu":
        return Shape(cpu)
    if kind == "share":
        return Shape(cpu, draw(st.one_of(st.sampled_from([250, 500, 100]), st.integers(1, 999))), 1, models)
    return Shape(cpu, 1000, draw(st.sampled_from([1, 2, 4, 8])), models)


def candidates(nodes: list[dict]) -> Candidates:
    state = SimpleNamespace(models=list(MODELS), **{
        name: np.array([n[name] for n in nodes], dtype=bool if name == "gpu_valid" else np.int64)
        for name in ("cpu_free", "gpu_free", "gpu_valid", "gpu_model", "gpu_idle")})
    return Candidates(state, np.arange(len(nodes)))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["fgd", "fgd-cpu"])
@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(node_states(), min_size=1, max_size=8), shape=shapes())
def test_few_scores_are_the_vectorised_strategys_own(name, nodes, shape):
    strategy = make_strategy(name, WORKLOAD, reference=True)
    few = strategy.score_few(candidates(nodes), shape)
    if few is None:  # some delta sits on one of FGD's steps: left to `score`
        return
    reference = strategy.score(candidates(nodes), shape)
    assert few.cost == reference.cost.tolist()  # score_few answers in lists
    assert (few.device is None) == (reference.device is None)
    if few.device is not None:
        assert few.device == reference.device.tolist()
    assert list(few.tiebreaks) == [t.tolist() for t in reference.tiebreaks]


@pytest.mark.parametrize("name", ["fgd", "fgd-cpu"])
@settings(max_examples=200, deadline=None)
@given(nodes=st.lists(node_states(), min_size=1, max_size=8), shape=shapes(), seed=st.integers(0, 2**32 - 1))
def test_figures_remembered_from_the_same_devices_in_another_order_give_the_references_scores(name, nodes, shape, seed):
    # F depends on the milli left per device as a multiset: what the plain
    # scoring remembers for one order of the devices serves every order
    strategy = make_strategy(name, WORKLOAD, reference=True)
    rng = np.random.default_rng(seed)
    shuffled = []
    for node in nodes:
        order = rng.permutation(COLS)
        shuffled.append(dict(node, gpu_free=[node["gpu_free"][j] for j in order],
                             gpu_valid=[node["gpu_valid"][j] for j in order]))
    strategy.score_few(candidates(shuffled), shape)
    few = strategy.score_few(candidates(nodes), shape)
    if few is None:
        return
    reference = strategy.score(candidates(nodes), shape)
    assert few.cost == reference.cost.tolist()
    if few.device is not None:
        assert few.device == reference.device.tolist()
    assert list(few.tiebreaks) == [t.tolist() for t in reference.tiebreaks]


def test_a_delta_on_a_step_is_left_to_the_vectorised_strategy():
    assert step(0.0) is None  # 100 · sigmoid(0) = 50 exactly: the reference's own rounding decides
    assert step(1e-12) is None
    assert step(-2000.0) == 11.0 and step(2000.0) == 88.0
    # just past the margin either side of the step at 50
    assert step(4 * 1000 * MARGIN / 100 * 10) == 50.0
    assert step(-4 * 1000 * MARGIN / 100 * 10) == 49.0


def test_a_cpu_pod_that_leaves_the_figures_as_they_were_scores_50_without_the_reference():
    # no GPU left to fragment, CPU above every threshold before and after:
    # both figures come from the same numbers, Δ = 0 exactly
    node = dict(cpu_free=120_000, gpu_free=[0] * COLS, gpu_valid=[True] * COLS, gpu_model=0, gpu_idle=0)
    few = make_strategy("fgd-cpu", WORKLOAD, reference=True).score_few(candidates([node]), Shape(1000))
    assert few is not None and few.cost == [-50.0]


def test_a_cpu_pod_crossing_a_threshold_on_a_node_with_no_gpu_left_scores_50_as_the_reference():
    # the pod's CPU moves the node to another row of W, but with no GPU idle
    # every term is 0: the reference's Δ is 0 exactly, and so is the score
    strategy = make_strategy("fgd-cpu", WORKLOAD, reference=True)
    nodes = [dict(cpu_free=cpu, gpu_free=[0] * COLS, gpu_valid=[True] * COLS, gpu_model=0, gpu_idle=0)
             for cpu in CPU_SHAPES[1:6]]
    few = strategy.score_few(candidates(nodes), Shape(1000))
    assert few is not None and few.cost == [-50.0] * len(nodes)
    assert strategy.score(candidates(nodes), Shape(1000)).cost.tolist() == few.cost


def test_the_score_cache_scores_most_new_states_in_plain_python_on_an_openb_replay():
    inner = make_strategy("fgd-cpu", WORKLOAD, reference=True)
    answers = []
    plain = inner.score_few

    def counted(c, shape):
        scored = plain(c, shape)
        answers.append(scored is not None)
        return scored

    inner.score_few = counted
    cached = ScoreCache(inner)
    state: ClusterState = load_cluster(NODES)
    sequence = arrival_sequence(PODS, seed=3, capacity_milli=1000 * sum(n.gpus for n in NODES))[:300]
    for i, pod in enumerate(sequence):
        request = pod_request(pod, key=str(i))
        choice = decide(state, request, cached)
        if choice.ok:
            state.assume(request.key, choice.allocation)
    assert len(answers) > 100
    assert sum(answers) / len(answers) > 0.8
