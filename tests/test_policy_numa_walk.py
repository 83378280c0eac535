"""§E least-loaded NUMA accumulation, vectorised over nodes."""

from __future__ import annotations

import numpy as np
import pytest

from builders import numa_rows
from tidal_policy.numa_walk import load_order, numa_scores

INF = float("inf")


rows = numa_rows  # (free CPUs, load) per NUMA node, per node


def test_worked_example_single_numa_beats_two():
    # node1: numa1 (load a = 0.2) holds the 4 CPUs alone → score 0.2
    # node2: least-loaded numa has 2 free, so numa1 + numa2 → (0.1 + 0.5)/2 = 0.3 = b
    # a < b → node1 on its numa1
    free, load, valid = rows([(2, 0.6), (6, 0.2)], [(2, 0.1), (8, 0.5)])
    choice = numa_scores(4, free, load, valid)
    assert choice.score.tolist() == pytest.approx([0.2, 0.3])
    assert int(np.argmin(choice.score)) == 0
    assert choice.taken[0].tolist() == [False, True, False, False]
    assert choice.taken[1].tolist() == [True, True, False, False]


@pytest.mark.parametrize("request_cpus, numas, score, count, taken", [
    (1, [(4, 0.3), (4, 0.1)], 0.1, 1, [1]),                    # first (least loaded) covers
    (6, [(4, 0.3), (4, 0.1)], 0.2, 2, [0, 1]),                 # 4 < 6 → add next: (0.1+0.3)/2
    (9, [(4, 0.3), (4, 0.1)], INF, 0, []),                     # 8 < 9 → infeasible
    (5, [(2, 0.0), (2, 0.2), (2, 0.4), (2, 0.6)], 0.2, 3, [0, 1, 2]),  # 2+2 < 5 ≤ 6: (0+0.2+0.4)/3
    (0, [(0, 0.5), (3, 0.7)], 0.5, 1, [0]),                    # nothing to cover: least loaded
    (2, [(2, 0.4), (5, 0.4)], 0.4, 1, [0]),                    # equal loads: lower column first
])
def test_accumulation_table(request_cpus, numas, score, count, taken):
    free, load, valid = rows(numas)
    choice = numa_scores(request_cpus, free, load, valid)
    assert choice.score[0] == pytest.approx(score)
    assert int(choice.count[0]) == count
    assert np.flatnonzero(choice.taken[0]).tolist() == taken
    assert bool(choice.feasible[0]) is (score != INF)


def test_per_row_requests_and_cached_order():
    free, load, valid = rows([(4, 0.9), (4, 0.1)], [(1, 0.2), (1, 0.3)])
    order = load_order(load, valid)
    assert order[0, :2].tolist() == [1, 0] and order[1, :2].tolist() == [0, 1]
    choice = numa_scores(np.array([2, 2]), free, load, valid, order)
    # row 0: numa1 (0.1) covers 2 → 0.1; row 1: 1 + 1 covers 2 → (0.2+0.3)/2 = 0.25
    assert choice.score.tolist() == pytest.approx([0.1, 0.25])


def test_padding_never_counts():
    # one real NUMA with 2 free; the 3 padded columns have free 0 and are ignored
    free, load, valid = rows([(2, 0.5)])
    free[0, 1:] = 99  # garbage in padding must not cover anything
    assert not numa_scores(3, free, load, valid).feasible[0]
