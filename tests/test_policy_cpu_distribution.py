"""§A per-NUMA exclusive CPU distribution for spread / single-numa / auto."""

from __future__ import annotations

import pytest

from builders import numa_rows
from tidal_policy.cpu_distribution import distribute


rows = numa_rows  # (free CPUs, load) per NUMA node, per node


@pytest.mark.parametrize("policy, cpus, numas, counts", [
    # worked example: 4 CPUs spread over 2 NUMA nodes → 2 + 2
    ("spread", 4, [(8, 0.0), (8, 0.0)], [2, 2]),
    # odd remainder goes to the NUMA node with most free: 5 = 2 + 2, +1 to numa1 (6 free)
    ("spread", 5, [(3, 0.0), (6, 0.0)], [2, 3]),
    # 6 over 4: 1 each, +2 to the two with most free (numa2: 9, numa0: 5)
    ("spread", 6, [(5, 0.0), (2, 0.0), (9, 0.0), (3, 0.0)], [2, 1, 2, 1]),
    # remainder ties on free go to the lower column: 3 over 2 equal → 2 + 1
    ("spread", 3, [(4, 0.0), (4, 0.0)], [2, 1]),
    # a NUMA node lacking its share makes spread impossible: 4 → 2 + 2 but numa0 has 1
    ("spread", 4, [(1, 0.0), (8, 0.0)], None),
    # single-numa: least loaded NUMA node that fits 3 (numa0 too small)
    ("single-numa", 3, [(2, 0.0), (4, 0.6), (4, 0.2)], [0, 0, 3]),
    ("single-numa", 5, [(4, 0.0), (4, 0.0)], None),
    # auto (§E): by load, numa1 (0.1) gives its 2, numa0 (0.5) the other 3
    ("auto", 5, [(6, 0.5), (2, 0.1)], [3, 2]),
    ("auto", 2, [(6, 0.5), (2, 0.1)], [0, 2]),
    ("auto", 9, [(6, 0.5), (2, 0.1)], None),
])
def test_distribution_table(policy, cpus, numas, counts):
    free, load, valid = rows(numas)
    result = distribute(policy, cpus, free, load, valid)
    if counts is None:
        assert not result.feasible[0] and result.counts[0].sum() == 0 and result.score[0] == float("inf")
    else:
        assert result.feasible[0]
        assert result.counts[0, :len(numas)].tolist() == counts
        assert result.counts[0].sum() == cpus


def test_vectorised_over_nodes_with_different_numa_counts():
    # 4 CPUs spread: 1-NUMA node → 4; 2-NUMA → 2+2; 4-NUMA → 1 each; last node too small
    free, load, valid = rows([(8, 0.0)], [(8, 0.0), (8, 0.0)], [(2, 0.0)] * 4, [(1, 0.0), (1, 0.0)])
    result = distribute("spread", 4, free, load, valid)
    assert result.feasible.tolist() == [True, True, True, False]
    assert result.counts[:3].tolist() == [[4, 0, 0, 0], [2, 2, 0, 0], [1, 1, 1, 1]]


def test_score_is_mean_load_of_numa_nodes_used():
    # single-numa on numa2 (0.2) → 0.2; spread over both of (0.4, 0.8) → 0.6
    free, load, valid = rows([(2, 0.0), (4, 0.6), (4, 0.2)])
    assert distribute("single-numa", 3, free, load, valid).score[0] == pytest.approx(0.2)
    free, load, valid = rows([(4, 0.4), (4, 0.8)])
    assert distribute("spread", 2, free, load, valid).score[0] == pytest.approx(0.6)


def test_unknown_policy_is_a_bug():
    free, load, valid = rows([(4, 0.0)])
    with pytest.raises(ValueError):
        distribute("random", 1, free, load, valid)
