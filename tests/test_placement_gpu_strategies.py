"""GPU strategies: registry, FGD's score and device choice (hand-computed),
FGD-CPU's tie-breaks, and the §B two-node example under FGD."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_placement.decide import PodRequest, decide
from tidal_placement.gpu_candidates import Candidates, sigmoid_score
from tidal_placement.gpu_fgd_cpu import cpu_per_gpu
from tidal_placement.gpu_strategies import GPU_STRATEGIES, make_strategy
from tidal_placement.gpu_workload import Shape, TargetWorkload, typical_workload
from tidal_simulator.topology_builder import make_topology

A, B, C = Shape(1000, 500, 1), Shape(2000, 1000, 1), Shape(4000)
WORKLOAD = TargetWorkload((A, B, C), np.array([0.5, 0.25, 0.25]))


def cluster(*nodes: tuple) -> ClusterState:
    """nodes: (name, CPUs, [milli left per GPU])."""
    state = ClusterState()
    for name, cpus, left in nodes:
        state.upsert_node(make_topology(name, (cpus,), gpus=len(left)))
        used = {f"gpu{i}": 1000 - m for i, m in enumerate(left) if m < 1000}
        if used:
            state.assume(f"{name}-used", Allocation.of(name, gpus=used))
    return state


def candidates(state: ClusterState) -> Candidates:
    return Candidates(state, np.flatnonzero(state.present[:state.size]))


def test_registry():
    assert set(GPU_STRATEGIES) == {"best-fit", "fgd", "fgd-cpu", "joint"}
    with pytest.raises(ValueError, match="unknown GPU strategy"):
        make_strategy("first-fit")
    for name in ("fgd", "fgd-cpu"):
        with pytest.raises(ValueError, match="target workload"):
            make_strategy(name)
        assert make_strategy(name, WORKLOAD).name == name


@pytest.mark.parametrize("delta, score", [(0, 50), (200, 54), (-150, 46), (250, 56), (-1e6, 0), (1e6, 100)])
def test_fgd_integer_score(delta, score):
    # ⌊100 · sigmoid(Δ/1000)⌋: sigmoid(0.2) = 0.5498 → 54, sigmoid(-0.15) = 0.4626 → 46
    assert sigmoid_score(np.array([float(delta)]))[0] == score


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=True), st.sampled_from([-7.1e5, -7.09e5, -7.0978e5, 0.0])), max_size=20))
def test_the_integer_score_is_the_sigmoids_floor_everywhere(deltas):
    # sigmoid_score caps exp's argument instead of ignoring the overflow: the same numbers
    delta = np.array(deltas, dtype=np.float64)
    with np.errstate(over="ignore"):
        plain = np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))
    assert np.array_equal(sigmoid_score(delta), plain, equal_nan=True)


def test_fgd_share_tries_every_device():
    # node: 3 CPUs, GPUs left [1000, 300] (F = 550, see test_placement_gpu_frag).
    # a 200 share on gpu1 → F 350, Δ +200 → 54; on gpu0 → F 700, Δ −150 → 46: gpu1 wins
    state = cluster(("n", 3, [1000, 300]))
    scored = make_strategy("fgd", WORKLOAD).score(candidates(state), Shape(0, 200, 1))
    assert scored.cost.tolist() == [-54] and scored.device.tolist() == [1]


def test_fgd_whole_gpu():
    # 1 CPU + 1 whole GPU: left [0, 300], 2 CPUs → F 300, Δ = 550 − 300 = 250 → 56
    state = cluster(("n", 3, [1000, 300]))
    scored = make_strategy("fgd", WORKLOAD).score(candidates(state), Shape(1000, 1000, 1))
    assert scored.cost.tolist() == [-56] and scored.device is None


def test_fgd_prefers_the_node_whose_fragment_it_fills():
    # a 300 share, 8 CPUs everywhere.
    # fresh [1000, 1000]: F = ¼·2000 = 500 → [700, 1000]: B's fragment 700, so
    #   F = ¼·700 + ¼·1700 = 600, Δ −100 → 47.
    # partial [1000, 300]: F = 550 → on gpu1 [1000, 0]: F = ¼·1000 = 250, Δ +300 → 57.
    state = cluster(("fresh", 8, [1000, 1000]), ("partial", 8, [1000, 300]))
    strategy = make_strategy("fgd", WORKLOAD)
    assert strategy.score(candidates(state), Shape(0, 300, 1)).cost.tolist() == [-47, -57]
    choice = decide(state, PodRequest("p", 0, gpu_count=1, gpu_milli=300), strategy)
    assert (choice.node, choice.allocation.gpus) == ("partial", (("gpu1", 300),))


def test_worked_example_b_under_fgd_places_all_four():
    # target workload = the tenant's containers (2, 1, 2, 3 GPUs): p = ½, ¼, ¼.
    # F(free f) = Σ p·f·[f < count]: F4 = F3 = 0, F2 = ¼·2000 = 500, F1 = ¾·1000 = 750, F0 = 0
    # 2 → a (tie, Δ −500); 1 → b (a: 500→750 Δ −250 → 43, b: 0→0 → 50);
    # 2 → a (Δ +500 → 62 vs b Δ −750 → 32); 3 → b. Everything fits.
    state = cluster(("a", 8, [1000] * 4), ("b", 8, [1000] * 4))
    shapes = [Shape(0, 1000, d) for d in (2, 1, 2, 3)]
    strategy = make_strategy("fgd", typical_workload(shapes, coverage=1.0))
    nodes = []
    for i, shape in enumerate(shapes):
        choice = decide(state, PodRequest(f"p{i}", 0, gpu_count=shape.gpu_count), strategy)
        assert choice.ok and state.assume(f"p{i}", choice.allocation).ok
        nodes.append(choice.node)
    assert nodes == ["a", "b", "a", "b"]


def test_rho_is_cpu_per_gpu_of_gpu_shapes():
    # GPU shapes: A (1000 CPU / 500 GPU, p ½), B (2000 / 1000, p ¼); C is CPU-only
    # ρ = (½·1000 + ¼·2000) / (½·500 + ¼·1000) = 1000 / 500 = 2
    assert cpu_per_gpu(WORKLOAD) == pytest.approx(2.0)


def test_fgd_cpu_sends_cpu_pods_where_cpu_is_spare():
    # X (100 CPU, 1 GPU) and Y (3900 CPU, 1 GPU), p ½ each: ρ = 4000/2000 = 2 CPU per GPU.
    # A 2-CPU CPU-only pod: FGD scores both nodes 50 (no typical shape stops fitting).
    # tight: 3 CPUs, 1 idle GPU: deficit 0 → max(0, 2 − 1) = 1 CPU; rich: 10 CPUs → 0.
    workload = TargetWorkload((Shape(100, 1000, 1), Shape(3900, 1000, 1)), np.array([0.5, 0.5]))
    state = cluster(("tight", 3, [1000]), ("rich", 10, [1000]))
    pod = PodRequest("p", 2000)
    assert decide(state, pod, make_strategy("fgd", workload)).node == "tight"  # tie: lowest row
    scored = make_strategy("fgd-cpu", workload).score(candidates(state), Shape(2000))
    # both have 1 idle GPU (the first key of a CPU-only pod), so the deficit decides
    assert scored.cost.tolist() == [-50, -50] and scored.tiebreaks[0].tolist() == [1000, 1000]
    assert scored.tiebreaks[1].tolist() == [1, 0]
    assert decide(state, pod, make_strategy("fgd-cpu", workload)).node == "rich"


def test_fgd_cpu_sends_cpu_pods_where_fewest_idle_gpus_could_need_the_cpu():
    # same workload (ρ = 2): "spent" has its one GPU taken, "rich" one idle GPU and CPU to
    # spare. FGD scores both 50 (nothing stops fitting); no deficit grows on either.
    # The CPU-only pod goes where no idle GPU could need the CPU: "spent" (0 idle) before "rich"
    workload = TargetWorkload((Shape(100, 1000, 1), Shape(3900, 1000, 1)), np.array([0.5, 0.5]))
    state = cluster(("rich", 10, [1000]), ("spent", 10, [0]))
    scored = make_strategy("fgd-cpu", workload).score(candidates(state), Shape(2000))
    assert scored.cost.tolist() == [-50, -50] and scored.tiebreaks[0].tolist() == [1000, 0]
    assert decide(state, PodRequest("p", 2000), make_strategy("fgd-cpu", workload)).node == "spent"
    # a GPU pod is not sent by idle GPUs: its only tiebreak is the deficit
    assert len(make_strategy("fgd-cpu", workload).score(candidates(state), Shape(100, 1000, 1)).tiebreaks) == 1


def test_fgd_cpu_leaves_equal_scores_to_the_final_tie_rule():
    # one shape (no CPU, 1 GPU): every placement scores 50, ρ = 0 so no deficit.
    # No packing key: the tie goes to decide's final rule (the lowest row here)
    # — packing sent pods to small nodes of scarce models first (see gpu_fgd_cpu)
    workload = TargetWorkload((Shape(0, 1000, 1),), np.array([1.0]))
    state = cluster(("empty", 8, [1000] * 4), ("some", 8, [1000, 1000, 0, 0]))
    strategy = make_strategy("fgd-cpu", workload)
    assert strategy.score(candidates(state), Shape(0, 1000, 1)).tiebreaks[0].tolist() == [0, 0]
    assert decide(state, PodRequest("p", 0, gpu_count=1), strategy).node == "empty"
    assert decide(state, PodRequest("p", 0, gpu_count=1), strategy, rank=np.array([1, 0])).node == "some"


@pytest.mark.parametrize("options, node", [
    ({}, "empty"),  # the default: no packing key, the final tie rule (lowest row)
    ({"packing": True}, "some"),  # the earlier rule, kept to measure it: 1 GPU left on "some" beats 3
])
def test_fgd_cpu_packing_is_a_switch_off_by_default(options, node):
    # the scenario of the earlier packing test: one shape (no CPU, 1 GPU), every
    # placement scores 50, ρ = 0. Pack key after the pod: "empty" 3/8 + ½·8/128 = .40625,
    # "some" 1/8 + ½·8/128 = .15625
    workload = TargetWorkload((Shape(0, 1000, 1),), np.array([1.0]))
    state = cluster(("empty", 8, [1000] * 4), ("some", 8, [1000, 1000, 0, 0]))
    strategy = make_strategy("fgd-cpu", workload, **options)
    scored = strategy.score(candidates(state), Shape(0, 1000, 1))
    assert len(scored.tiebreaks) == 1 + len(options)
    if options:
        assert scored.tiebreaks[-1].tolist() == pytest.approx([0.40625, 0.15625])
    assert decide(state, PodRequest("p", 0, gpu_count=1), strategy).node == node


def test_fgd_cpu_switched_back_scores_as_fgd_with_the_published_target():
    # target="typical" and no_access_is_fragment=True give FGD's own cost (the G2/T4
    # example below: 50 on G2, 58 on the T4); cpu_pods_by_idle=False leaves a
    # CPU-only pod the deficit alone
    g2, anyone = Shape(0, 1000, 1, ("G2",)), Shape(0, 1000, 1)
    workload = typical_workload([g2, anyone, anyone], coverage=1.0)
    state = ClusterState()
    state.upsert_node(make_topology("g2", (8,), gpus=8, model="G2"))
    state.upsert_node(make_topology("t4", (8,), gpus=2, model="T4"))
    published = make_strategy("fgd-cpu", workload, target="typical", no_access_is_fragment=True,
                              cpu_pods_by_idle=False)
    assert published.score(candidates(state), anyone).cost.tolist() == [-50, -58]
    assert len(published.score(candidates(state), Shape(1000)).tiebreaks) == 1
    with pytest.raises(ValueError, match="by_model or typical"):
        make_strategy("fgd-cpu", workload, target="other")


def test_fgd_cpu_does_not_pull_pods_onto_the_model_fewer_shapes_may_use():
    # ⅓ of the GPU pods may only use G2, ⅔ any model; a G2 node (8 GPUs), a T4 node (2).
    # An unconstrained 1-GPU pod. FGD counts the barred G2-only share as fragment on the T4:
    #   T4: F = ⅓·2000 → ⅓·1000, Δ +333 → ⌊100·sigmoid(0.333)⌋ = 58; G2: all fit, Δ 0 → 50
    #   — FGD fills the T4, the model fewer shapes may use, however scarce it is.
    # fgd-cpu: the G2-only shape counts nothing on the T4: Δ 0 on both, 50 and 50
    g2, anyone = Shape(0, 1000, 1, ("G2",)), Shape(0, 1000, 1)
    workload = typical_workload([g2, anyone, anyone], coverage=1.0)
    state = ClusterState()
    state.upsert_node(make_topology("g2", (8,), gpus=8, model="G2"))
    state.upsert_node(make_topology("t4", (8,), gpus=2, model="T4"))
    assert make_strategy("fgd", workload).score(candidates(state), anyone).cost.tolist() == [-50, -58]
    assert make_strategy("fgd-cpu", workload).score(candidates(state), anyone).cost.tolist() == [-50, -50]


def test_fgd_cpu_share_ties_go_to_the_fullest_device():
    # shape: 100-milli shares. A 300 share leaves 700 on gpu0 or 200 on gpu1:
    # neither is below 100, so both score the same; FGD takes the first, FGD-CPU the fuller
    workload = TargetWorkload((Shape(0, 100, 1),), np.array([1.0]))
    state = cluster(("n", 8, [1000, 500]))
    share = Shape(0, 300, 1)
    assert make_strategy("fgd", workload).score(candidates(state), share).device.tolist() == [0]
    assert make_strategy("fgd-cpu", workload).score(candidates(state), share).device.tolist() == [1]


def test_best_fit_quantised_normalises_like_kube_scheduler():
    # leftover: n1 = .5·(8000−1000)/128000 + .5·(1000−1000)/8000 = 0.02734 → ⌊97.27⌋ = 97
    #           n2 = .5·(64000−1000)/128000 + .5·(4000−1000)/8000 = 0.43359 → ⌊56.64⌋ = 56
    # min-max to 0..100: n1 100, n2 0 → cost −100, 0
    state = cluster(("n1", 8, [1000]), ("n2", 64, [1000] * 4))
    scored = make_strategy("best-fit", quantised=True).score(candidates(state), Shape(1000, 1000, 1))
    assert scored.cost.tolist() == [-100, 0]
    exact = make_strategy("best-fit").score(candidates(state), Shape(1000, 1000, 1))
    assert exact.cost.tolist() == pytest.approx([0.02734375, 0.43359375])


def test_the_typical_workload_is_relearnt_doubling_then_every_n_pods():
    from tidal_placement.learning import refresh_due
    assert [k for k in range(1, 1600) if refresh_due(k, 500)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 501, 1001, 1501]
    assert [k for k in range(1, 6) if refresh_due(k, 1)] == [1, 2, 3, 4, 5]


def test_a_relearnt_strategy_starts_from_the_node_states_its_predecessor_knew():
    from types import SimpleNamespace

    from tidal_placement.learning import StrategyLearner
    from tidal_schemas import GpuAsk, Resources
    learner = StrategyLearner("fgd-cpu", every=500)
    pod = SimpleNamespace(namespace="ns", name="p", requests=Resources(cpu_milli=1000, memory_mib=1024),
                          exclusive_cpus=False, cpu_policy=None, gpu=GpuAsk(count=1, milli=500))
    learner.observe(pod)  # the first pod: fgd-cpu over its shape
    first = learner.strategy
    state = cluster(("n1", 8, [1000]), ("n2", 8, [500, 1000]))
    first.score(candidates(state), Shape(1000, 500, 1))  # the cache has met the nodes
    learner.observe(SimpleNamespace(**{**vars(pod), "gpu": GpuAsk(count=1)}))  # the second pod: relearnt
    assert learner.strategy is not first
    assert learner.strategy._states is not first._states  # a copy: the first may still be deciding
    assert learner.strategy._states.ids == first._states.ids  # both nodes' states, numbered as before
    scored = learner.strategy.score(candidates(state), Shape(1000, 500, 1))
    plain = make_strategy("fgd-cpu", typical_workload([Shape(1000, 500, 1), Shape(1000, 1000, 1)]), reference=True)
    assert scored.cost.tolist() == plain.score(candidates(state), Shape(1000, 500, 1)).cost.tolist()


def test_drift_is_the_share_of_pods_whose_shape_moved():
    from tidal_placement.gpu_workload import drift
    mix = typical_workload([A] * 6 + [B] * 3 + [C])
    assert drift(mix, typical_workload([A] * 60 + [B] * 30 + [C] * 10)) == pytest.approx(0.0)
    assert drift(mix, typical_workload([Shape(8000)] * 4)) == pytest.approx(1.0)
    # a tenth of the pods moved from A to a shape not seen before
    assert drift(mix, typical_workload([A] * 5 + [B] * 3 + [C] + [Shape(8000)])) == pytest.approx(0.1)
    # hand-built targets compare by their popularity
    assert drift(WORKLOAD, TargetWorkload((A, B), np.array([0.5, 0.5]))) == pytest.approx(0.25)


def test_a_learner_keeps_its_strategy_while_the_mix_stays_within_the_tolerance():
    from tidal_placement.learning import StrategyLearner
    learner = StrategyLearner("fgd-cpu", every=10, tolerance=0.15)
    for shape in [A, B] * 5 + [A]:  # due after pods 1, 2, 4, 8 and 11: built at 1 and 2 (A, then half B)
        learner.observe_shape(shape)
    built, kept = learner.rebuilds, learner.strategy
    assert built == 2
    for shape in [A, B] * 5:  # pod 21: the same mix
        learner.observe_shape(shape)
    assert learner.strategy is kept and learner.rebuilds == built
    for shape in [C] * 10:  # pod 31: a third of the last pods are C, which the strategy never saw
        learner.observe_shape(shape)
    assert learner.strategy is not kept and learner.rebuilds == built + 1
    assert C in learner.workload.shapes

    always = StrategyLearner("fgd-cpu", every=10)  # tolerance 0: rebuilt whenever the mix moved at all
    for shape in [A, B, C, C] + [A] * 4 + [B] * 3 + [C] * 10:
        always.observe_shape(shape)
    assert always.rebuilds == 6  # after pods 1, 2, 4, 8, 11 and 21 (refresh_due): no two mixes alike


def test_sampling_drift_is_what_two_samples_of_one_mix_differ_by_on_average():
    from tidal_placement.learning import sampling_drift
    rng = np.random.default_rng(7)
    shapes = [Shape(1000 * (i + 1), 500, 1) for i in range(40)]
    share = rng.dirichlet(np.ones(len(shapes)))
    mix = dict(zip(shapes, share.tolist()))
    for window, replaced in ((5000, 5000), (5000, 500), (800, 300)):
        drifts = []
        for _ in range(200):  # windows sharing window - replaced shapes, differing in the rest
            shared = rng.multinomial(window - replaced, share)
            a, b = shared + rng.multinomial(replaced, share), shared + rng.multinomial(replaced, share)
            drifts.append(0.5 * np.abs(a - b).sum() / window)
        assert sampling_drift(mix, window, replaced) == pytest.approx(np.mean(drifts), rel=0.1)
    assert sampling_drift(mix, 5000, 0) == 0.0
    assert sampling_drift({A: 1.0}, 5000, 5000) == 0.0  # one shape: nothing to sample


def test_a_full_window_rebuilds_only_for_drift_beyond_sampling_noise(monkeypatch):
    from tidal_placement import learning
    monkeypatch.setattr(learning, "SHAPES_KEPT", 600)
    rng = np.random.default_rng(3)
    shapes = [Shape(500 * (i + 1), 250 * (i % 4 + 1), 1) for i in range(30)]
    even = [shapes[i] for i in rng.integers(len(shapes), size=6000)]  # one mix throughout

    def rebuilds_after_the_window_fills(learner) -> int:
        for shape in even[:600]:
            learner.observe_shape(shape)
        built = learner.rebuilds
        for shape in even[600:]:
            learner.observe_shape(shape)
        return learner.rebuilds - built

    # 30 shapes, windows of 600: two windows differ by 5-12 % by chance alone, past a 5 % tolerance
    learner = learning.StrategyLearner("fgd-cpu", every=100, tolerance=0.05)
    assert rebuilds_after_the_window_fills(learner) <= 3
    assert learner._noise() > 0.05
    tolerance_alone = learning.StrategyLearner("fgd-cpu", every=100, tolerance=0.05)
    monkeypatch.setattr(tolerance_alone, "_noise", lambda: 0.0)
    assert rebuilds_after_the_window_fills(tolerance_alone) >= 30

    built = learner.rebuilds
    for shape in [shapes[0]] * 300:  # half the window moves to one shape: rebuilt
        learner.observe_shape(shape)
    assert learner.rebuilds > built and learner.workload.shapes[0] == shapes[0]

    fresh = learning.StrategyLearner("fgd-cpu", every=100, tolerance=0.05)
    for shape in even[:599]:  # built from fewer shapes than the window holds: the tolerance alone
        fresh.observe_shape(shape)
    assert fresh._noise() == 0.0


def test_a_learner_counts_the_shapes_it_keeps_as_they_come_and_go(monkeypatch):
    from tidal_placement import learning
    monkeypatch.setattr(learning, "SHAPES_KEPT", 7)
    learner = learning.StrategyLearner("fgd-cpu", every=5)
    seen = [A, B, A, C, C, C, B, A, A, A, B, C, A, A, A, A, A, A, A, B]
    for i, shape in enumerate(seen, 1):
        learner.observe_shape(shape)
        window = seen[max(0, i - 7):i]
        assert learner.counts == Counter(window) and 0 not in learner.counts.values()
    built = typical_workload(seen[9:16])  # last built after pod 16 (refresh_due), from pods 10-16
    assert (learner.workload.shapes, learner.workload.observed) == (built.shapes, built.observed)
    assert learner.workload.popularity.tolist() == built.popularity.tolist()


def test_the_drift_tolerated_is_a_share_of_the_pods():
    from pydantic import ValidationError

    from tidal_placement import PlacementSettings
    assert PlacementSettings().workload_drift == 0.05
    with pytest.raises(ValidationError):
        PlacementSettings(workload_drift=1.5)
