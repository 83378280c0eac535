"""GPU fragmentation measure (FGD / METHOD.md §2) and the typical-pod
target workload (§2.4), against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from tidal_placement.gpu_frag import FragModel
from tidal_placement.gpu_workload import Shape, TargetWorkload, by_model, typical_workload

A = Shape(1000, 500, 1)          # half a GPU
B = Shape(2000, 1000, 1)         # one whole GPU
C = Shape(4000)                  # CPU only
WORKLOAD = TargetWorkload((A, B, C), np.array([0.5, 0.25, 0.25]))
MODELS = ("A100",)


def frag(cpu, gpus, model=0, workload=WORKLOAD):
    return FragModel(workload).node_frag(np.array([cpu]), np.array([gpus]), np.array([model]), MODELS)[0]


@pytest.mark.parametrize("cpu, gpus, expected", [
    # A fits: frag = GPUs < 500 = 300; B fits: GPUs < 1000 = 300; C: all idle 1300
    # .5·300 + .25·300 + .25·1300 = 550
    (3000, [1000, 300], 550),
    # B lacks CPU (1500 < 2000) → all idle: .5·300 + .25·1300 + .25·1300 = 800
    (1500, [1000, 300], 800),
    # no device ≥ 500: every shape sees all 700 idle as fragment
    (3000, [400, 300], 700),
    # a full node has nothing to fragment
    (3000, [0, 0], 0),
    # an empty node with room for everything: only the CPU-only share counts, .25·2000
    (8000, [1000, 1000], 500),
])
def test_node_fragmentation(cpu, gpus, expected):
    assert frag(cpu, gpus) == pytest.approx(expected)


def test_model_constraint_makes_idle_gpu_fragment():
    # D may only use T4; on an A100 node (model 0) it sees all 300 idle as fragment
    d = Shape(0, 200, 1, ("T4",))
    workload = TargetWorkload((d,), np.array([1.0]))
    assert frag(1000, [300], workload=workload) == pytest.approx(300)
    assert frag(1000, [300], model=-1, workload=workload) == pytest.approx(300)  # node without GPUs


def test_after_share_per_device():
    model = FragModel(WORKLOAD)
    after = model.after_share(np.array([3000]), np.array([[1000, 300]]), np.array([0]), MODELS, 200)
    # on gpu1 (300 → 100): A .5·100 + B .25·100 + C .25·1100 = 350
    # on gpu0 (1000 → 800): A .5·300 + B (no full GPU) .25·1100 + C .25·1100 = 700
    assert after[0].tolist() == pytest.approx([700, 350])


def test_after_whole_gpu():
    model = FragModel(WORKLOAD)
    after = model.after_whole(np.array([2000]), np.array([[1000, 300]]), np.array([0]), MODELS, 1)
    # left [0, 300], CPU 2000: nothing fits any more → all 300 idle is fragment
    assert after[0] == pytest.approx(300)


def test_multi_gpu_shape_needs_count_devices():
    two = Shape(0, 1000, 2)
    workload = TargetWorkload((two,), np.array([1.0]))
    assert frag(1000, [1000, 1000, 0], workload=workload) == 0        # 2 full devices: fits
    assert frag(1000, [1000, 900, 0], workload=workload) == pytest.approx(1900)


def test_typical_workload_keeps_the_popular_shapes():
    # 6 × a, 3 × b, 1 × c: 95 % coverage needs all three (6+3 = 9 < 9.5)
    shapes = [A] * 6 + [B] * 3 + [C]
    w = typical_workload(shapes, coverage=0.95)
    assert w.shapes == (A, B, C) and w.popularity.tolist() == pytest.approx([0.6, 0.3, 0.1])
    # 85 % coverage: a + b (9 ≥ 8.5), renormalised to 6/9 and 3/9
    w = typical_workload(shapes, coverage=0.85)
    assert w.shapes == (A, B) and w.popularity.tolist() == pytest.approx([2 / 3, 1 / 3])


def test_typical_workload_ties_prefer_the_larger_shape():
    # equal counts: the simulator's reversed sort puts the larger CPU first
    small, big = Shape(1000, 500, 1), Shape(2000, 500, 1)
    w = typical_workload([small, big], coverage=0.5)
    assert w.shapes == (big,)


def test_empty_workload_is_a_bug():
    with pytest.raises(ValueError):
        typical_workload([])


# ---- GPU-model constraints: who may land on the node counts (fgd-cpu) --------------------

T4_ONLY = Shape(1000, 500, 1, ("T4",))
CONSTRAINED = TargetWorkload((A, T4_ONLY, C), np.array([0.5, 0.25, 0.25]))
TWO_MODELS = ("A100", "T4")


@pytest.mark.parametrize("model, fragment, expected", [
    # node: 3000 CPU, GPUs left [1000, 300] (idle 1300). A fits: its fragment is
    # the 300 device (.5·300 = 150); C (CPU-only) counts all idle: .25·1300 = 325.
    # On an A100 node the T4-only shape cannot land: FGD counts all idle for it
    # (.25·1300 = 325, F = 800); with no_access_is_fragment=False it counts nothing (F = 475).
    (0, True, 800),
    (0, False, 475),
    # on a T4 node it fits and sees the 300 device as fragment (.25·300): both 550
    (1, True, 550),
    (1, False, 550),
])
def test_a_constrained_shape_counts_only_where_it_may_land(model, fragment, expected):
    frag = FragModel(CONSTRAINED, no_access_is_fragment=fragment)
    got = frag.node_frag(np.array([3000]), np.array([[1000, 300]]), np.array([model]), TWO_MODELS)
    assert got[0] == pytest.approx(expected)


@pytest.mark.parametrize("fragment, expected", [
    # an A100 node, 2000 CPU left after the pod, GPUs [1000, 300]; a 300 share
    # on gpu0 → [700, 300], idle 1000: A fits on gpu0, fragment 300 (.5·300 = 150);
    #   C .25·1000 = 250; T4-only .25·1000 = 250 under FGD, 0 otherwise → 650 / 400
    # on gpu1 → [1000, 0]: A's fragment 0; C 250; T4-only 250 or 0 → 500 / 250
    (True, [650, 500]),
    (False, [400, 250]),
])
def test_after_share_leaves_barred_shapes_out_too(fragment, expected):
    frag = FragModel(CONSTRAINED, no_access_is_fragment=fragment)
    after = frag.after_share(np.array([2000]), np.array([[1000, 300]]), np.array([0]), TWO_MODELS, 300)
    assert after[0].tolist() == pytest.approx(expected)


def test_a_node_without_gpus_has_nothing_to_fragment_either_way():
    for fragment in (True, False):
        frag = FragModel(CONSTRAINED, no_access_is_fragment=fragment)
        assert frag.node_frag(np.array([3000]), np.array([[0, 0]]), np.array([-1]), TWO_MODELS)[0] == 0


def test_every_gpu_shape_barred_leaves_only_cpu_shapes_counting():
    # on an A100 node: A100 barred for both GPU shapes; only C (.25) counts the idle
    barred = TargetWorkload((T4_ONLY, Shape(0, 1000, 1, ("T4",)), C), np.array([0.5, 0.25, 0.25]))
    frag = FragModel(barred, no_access_is_fragment=False)
    assert frag.node_frag(np.array([3000]), np.array([[1000, 300]]), np.array([0]), TWO_MODELS)[0] == \
        pytest.approx(0.25 * 1300)


# ---- by_model: the typical workload with its constraints kept ---------------------------

A_T4, A_V100 = Shape(1000, 500, 1, ("T4",)), Shape(1000, 500, 1, ("V100",))


@pytest.mark.parametrize("shapes, coverage, published, tidal", [
    # 4 A, 3 A-T4, 3 A-V100, 5 B, 1 C (16 pods). Published cut at 80 % (12.8 pods):
    # B 5, A 4, A-T4 3 (12), A-V100 3 → 15: keeps four, the T4 share 3/15.
    # by_model cuts the bare shapes: A 10, B 5 → 15 ≥ 12.8; A splits 4 / 3 / 3.
    ([A] * 4 + [A_T4] * 3 + [A_V100] * 3 + [B] * 5 + [C], 0.8,
     {B: 5 / 15, A: 4 / 15, A_V100: 3 / 15, A_T4: 3 / 15},
     {A: 4 / 15, A_T4: 3 / 15, A_V100: 3 / 15, B: 5 / 15}),
    # at 60 % (9.6 pods) the published cut stops after B, A (9) and one of the
    # 3-pod constrained shapes (the larger model list sorts first: V100): 12 pods;
    # by_model keeps A (10) whole, every constraint of it, and drops B
    ([A] * 4 + [A_T4] * 3 + [A_V100] * 3 + [B] * 5 + [C], 0.6,
     {B: 5 / 12, A: 4 / 12, A_V100: 3 / 12},
     {A: 4 / 10, A_T4: 3 / 10, A_V100: 3 / 10}),
    # no constraints: the same target both ways
    ([A] * 6 + [B] * 3 + [C], 0.95, {A: .6, B: .3, C: .1}, {A: .6, B: .3, C: .1}),
])
def test_by_model_keeps_the_constrained_share(shapes, coverage, published, tidal):
    w = typical_workload(shapes, coverage)
    assert dict(zip(w.shapes, w.popularity.tolist())) == pytest.approx(published)
    target = by_model(w)
    assert dict(zip(target.shapes, target.popularity.tolist())) == pytest.approx(tidal)


def test_by_model_of_a_hand_built_workload_is_itself():
    assert by_model(WORKLOAD) is WORKLOAD
