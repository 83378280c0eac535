"""GPU fragmentation measure (FGD / METHOD.md §2) and the typical-pod
target workload (§2.4), against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from tidal_placement.gpu_frag import FragModel
from tidal_placement.gpu_workload import Shape, TargetWorkload, typical_workload

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
