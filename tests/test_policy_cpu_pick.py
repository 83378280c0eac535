"""§A CPU choice: the packed allocator must match kubelet's
`TestTakeByTopologyNUMAPacked` case for case; spread / single-numa / auto take
placement's per-NUMA counts (`cpu_distribution`) and pack within each."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidal_schemas import Cpu
from tidal_policy.cpu_distribution import distribute
from tidal_policy.cpu_pick import (
    POLICIES,
    pick_cpus,
    pick_per_numa,
    preference_order,
    take_packed,
)
from tidal_topology.cpuset import parse_cpuset


def machine(rows: dict[int, tuple[int, int, int]]) -> list[Cpu]:
    """cpu -> (core, socket, numa), the shape of kubelet's CPUDetails."""
    return [Cpu(cpu=cpu, core=core, socket=socket, numa=numa) for cpu, (core, socket, numa) in sorted(rows.items())]


def cpus(text: str) -> set[int]:
    return set(parse_cpuset(text))


# kubelet policy_test.go topologies, transcribed.
SINGLE_SOCKET_HT = machine({cpu: (cpu % 4, 0, 0) for cpu in range(8)})  # cores {0,4} {1,5} {2,6} {3,7}
DUAL_SOCKET_HT = machine({cpu: (cpu % 6, cpu % 2, cpu % 2) for cpu in range(12)})  # socket0 = even cpus
DUAL_SOCKET_NO_HT = machine({cpu: (cpu, cpu // 4, cpu // 4) for cpu in range(8)})
TRIPLE_SOCKET_HT = machine({cpu: (cpu // 2, [1, 1, 1, 0, 0, 0, 2, 2, 2][cpu // 2], 0) for cpu in range(18)})
# Xeon Gold 6230 x2: NUMA n = cpus 10n..10n+9 and their siblings +40; sockets hold NUMA 0-1 and 2-3.
DUAL_SOCKET_MULTI_NUMA_HT = machine({cpu: (cpu % 40, (cpu % 40) // 20, (cpu % 40) // 10) for cpu in range(80)})
# The same machine with NUMA nodes and sockets flipped: 4 sockets, 2 NUMA nodes.
FAKE_MULTI_SOCKET_PER_NUMA_HT = machine({cpu: (cpu % 40, (cpu % 40) // 10, (cpu % 40) // 20) for cpu in range(80)})


# (description, topology, available, count, expected cpuset or None for failure)
PACKED_CASES = [
    ("take more cpus than are available from single socket with HT",
     SINGLE_SOCKET_HT, {0, 2, 4, 6}, 5, None),
    ("take zero cpus from single socket with HT", SINGLE_SOCKET_HT, cpus("0-7"), 0, set()),
    ("take one cpu from single socket with HT", SINGLE_SOCKET_HT, cpus("0-7"), 1, {0}),
    ("take one cpu from single socket with HT, some cpus are taken",
     SINGLE_SOCKET_HT, {1, 3, 5, 6, 7}, 1, {6}),
    ("take two cpus from single socket with HT", SINGLE_SOCKET_HT, cpus("0-7"), 2, {0, 4}),
    ("take all cpus from single socket with HT", SINGLE_SOCKET_HT, cpus("0-7"), 8, cpus("0-7")),
    ("take two cpus from single socket with HT, only one core totally free",
     SINGLE_SOCKET_HT, {0, 1, 2, 3, 6}, 2, {2, 6}),
    ("take a socket of cpus from dual socket with HT", DUAL_SOCKET_HT, cpus("0-11"), 6, {0, 2, 4, 6, 8, 10}),
    ("take a socket of cpus from dual socket with multi-numa-per-socket with HT",
     DUAL_SOCKET_MULTI_NUMA_HT, cpus("0-79"), 40, cpus("0-19,40-59")),
    ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
     DUAL_SOCKET_MULTI_NUMA_HT, cpus("0-79"), 20, cpus("0-9,40-49")),
    ("take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, with 1 NUMA node already taken",
     DUAL_SOCKET_MULTI_NUMA_HT, cpus("10-39,50-79"), 20, cpus("10-19,50-59")),
    ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
     DUAL_SOCKET_MULTI_NUMA_HT, cpus("0-79"), 60, cpus("0-29,40-69")),
    ("take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, a core taken",
     DUAL_SOCKET_MULTI_NUMA_HT, cpus("1-39,41-79"), 60, cpus("10-39,50-79")),
    ("take one cpu from dual socket with HT - core from Socket 0",
     DUAL_SOCKET_HT, {1, 2, 3, 4, 5, 7, 8, 9, 10, 11}, 1, {2}),
    ("allocate 4 full cores with 3 coming from the first NUMA node (filling it up) and 1 coming from the second NUMA node",
     DUAL_SOCKET_HT, cpus("0-11"), 8, cpus("0,6,2,8,4,10,1,7")),
    ("allocate 32 full cores with 30 coming from the first 3 NUMA nodes (filling them up) and 2 coming from the fourth NUMA node",
     DUAL_SOCKET_MULTI_NUMA_HT, cpus("0-79"), 64, cpus("0-29,40-69,30,31,70,71")),
]


@pytest.mark.parametrize("description, topology, available, count, expected", PACKED_CASES,
                         ids=[c[0] for c in PACKED_CASES])
def test_packed_matches_kubelet(description, topology, available, count, expected):
    result = take_packed(topology, available, count)
    if expected is None:
        assert result.cpus is None
        assert "not enough cpus" in result.reason
    else:
        assert result.cpus == sorted(expected), description


# kubelet TestCPUAccumulatorFreeCPUs: the order single threads are taken in.
ORDER_CASES = [
    ("single socket HT, 8 cpus free", SINGLE_SOCKET_HT, cpus("0-7"), [0, 4, 1, 5, 2, 6, 3, 7]),
    # cores 0-2 have one free thread each, core 3 has two: partly used cores first
    ("single socket HT, 5 cpus free", SINGLE_SOCKET_HT, {3, 4, 5, 6, 7}, [4, 5, 6, 3, 7]),
    ("dual socket HT, 12 cpus free", DUAL_SOCKET_HT, cpus("0-11"), [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
    ("dual socket HT, 11 cpus free", DUAL_SOCKET_HT, cpus("1-11"), [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
    ("dual socket HT, 10 cpus free", DUAL_SOCKET_HT, {1, 2, 3, 4, 5, 7, 8, 9, 10, 11},
     [2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
    # socket 2 has 2 free, socket 1 has 4, socket 0 has 6
    ("triple socket HT, 12 cpus free", TRIPLE_SOCKET_HT, cpus("0-3,6-13"), [12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11]),
]


@pytest.mark.parametrize("description, topology, available, expected", ORDER_CASES, ids=[c[0] for c in ORDER_CASES])
def test_thread_order_matches_kubelet(description, topology, available, expected):
    assert preference_order(topology, available) == expected


# Whole-unit phases, seen through the choice: these follow kubelet's
# TestCPUAccumulatorFree{Sockets,NUMANodes} topologies.
UNIT_CASES = [
    # 4 sockets, 2 NUMA: NUMA is the outer unit; 20 = one NUMA node (two sockets)
    ("numa outer: a whole NUMA node", FAKE_MULTI_SOCKET_PER_NUMA_HT, cpus("0-79"), 40, cpus("0-19,40-59")),
    # NUMA 0 lost cpu 0, so the whole free sockets taken are those of NUMA 1 (sockets 2, 3)
    ("numa outer: busy NUMA node skipped for whole sockets", FAKE_MULTI_SOCKET_PER_NUMA_HT,
     cpus("1-79"), 40, cpus("20-39,60-79")),
    # one socket (20 cpus) wanted; the partly used NUMA node 0 has the fewest free, its free socket 1 is taken
    ("numa outer: a whole socket from the busiest NUMA node", FAKE_MULTI_SOCKET_PER_NUMA_HT,
     cpus("1-79"), 20, cpus("10-19,50-59")),
    ("no HT: whole socket", DUAL_SOCKET_NO_HT, cpus("0-7"), 4, cpus("0-3")),
    # socket 0 has 3 free, socket 1 has 4: fill the partly used socket first
    ("no HT: partly used socket first", DUAL_SOCKET_NO_HT, cpus("1-7"), 2, {1, 2}),
    # 3 wanted from the partly used socket 0 (3 free): exactly those
    ("no HT: partly used socket exactly", DUAL_SOCKET_NO_HT, cpus("1-7"), 3, {1, 2, 3}),
    # 5 wanted: whole free socket 1 (4), then the first thread of socket 0
    ("no HT: whole socket then a thread", DUAL_SOCKET_NO_HT, cpus("1-7"), 5, {1, 4, 5, 6, 7}),
]


@pytest.mark.parametrize("description, topology, available, count, expected", UNIT_CASES,
                         ids=[c[0] for c in UNIT_CASES])
def test_packed_whole_units(description, topology, available, count, expected):
    assert take_packed(topology, available, count).cpus == sorted(expected)


def test_core_ids_restarting_per_socket_are_distinct_cores():
    # raw sysfs core_id restarts per socket; one NUMA node, two sockets:
    # socket0 cores 0 {0,4}, 1 {1,5}; socket1 cores 0 {2,6}, 1 {3,7}
    topology = machine({0: (0, 0, 0), 4: (0, 0, 0), 1: (1, 0, 0), 5: (1, 0, 0),
                        2: (0, 1, 0), 6: (0, 1, 0), 3: (1, 1, 0), 7: (1, 1, 0)})
    # socket1 (1 free) is walked first but its core 0 is not whole; socket0's core 0 {0,4} is.
    # Keyed by core id alone, "core 0" would be {0,2,4,6} and no core would be whole.
    assert take_packed(topology, {0, 4, 2}, 2).cpus == [0, 4]


def test_unknown_available_cpus_are_ignored_like_kubelet_keep_only():
    result = take_packed(SINGLE_SOCKET_HT, {0, 4, 99}, 3)
    assert result.cpus is None and "available 2" in result.reason


# -- spread and single-numa -------------------------------------------------

def test_spec_worked_example_four_cpus_spread_over_two_numa_nodes():
    # §A: 4 CPUs, 2 NUMA nodes -> 2 on numa0 + 2 on numa1; packed in each = one whole core each
    result = pick_cpus(DUAL_SOCKET_HT, cpus("0-11"), 4, policy="spread")
    assert result.cpus == [0, 1, 6, 7]
    chosen_numa = [c.numa for c in DUAL_SOCKET_HT if c.cpu in result.cpus]
    assert chosen_numa.count(0) == 2 and chosen_numa.count(1) == 2


POLICY_CASES = [
    # (description, topology, available, count, policy, expected or None)
    # numa0 has 5 free ({0,2,4,6,8} minus 10), numa1 has 6: shares 2 + 2
    ("spread with a busy thread", DUAL_SOCKET_HT, cpus("0-9,11"), 4, "spread", {0, 6, 1, 7}),
    # 3 over 2 NUMA: remainder to numa1 (6 free > 5 free); numa0 takes its lone-thread core {4} first? no:
    # numa0 free = 0,2,4,6,8 -> 1 cpu: core 4 has one free thread (10 busy) -> 4; numa1 takes core {1,7}
    ("spread remainder to the freer NUMA", DUAL_SOCKET_HT, cpus("0-9,11"), 3, "spread", {4, 1, 7}),
    ("spread across four NUMA nodes", DUAL_SOCKET_MULTI_NUMA_HT, cpus("0-79"), 8, "spread",
     {0, 40, 10, 50, 20, 60, 30, 70}),
    ("spread fails when a NUMA node lacks its share", DUAL_SOCKET_HT, {0, 1, 3, 5, 7, 9, 11}, 4, "spread", None),
    ("spread fails beyond the available total", DUAL_SOCKET_HT, {0, 1}, 3, "spread", None),
    # numa0 has 4 free, numa1 has 6: both fit 4, equally loaded: the lower id
    ("single-numa ties on load go to the lower id", DUAL_SOCKET_HT, {0, 2, 4, 6, 1, 3, 5, 7, 9, 11}, 4,
     "single-numa", {0, 2, 4, 6}),
    # 5 does not fit numa0 (4 free): numa1
    ("single-numa skips nodes that do not fit", DUAL_SOCKET_HT, {0, 2, 4, 6, 1, 3, 5, 7, 9, 11}, 5,
     "single-numa", {1, 3, 5, 7, 9}),
    ("single-numa ties go to the lower id", DUAL_SOCKET_HT, cpus("0-11"), 2, "single-numa", {0, 6}),
    ("single-numa fails when no node holds the count", DUAL_SOCKET_HT, cpus("0-11"), 7, "single-numa", None),
    ("single-numa inside the multi-NUMA socket", DUAL_SOCKET_MULTI_NUMA_HT, cpus("0-79"), 20, "single-numa",
     cpus("0-9,40-49")),
    # spread is over all the node's NUMA nodes (SPEC §A): numa0 with none free lacks its share
    ("spread over every NUMA node, free or not", DUAL_SOCKET_HT, {1, 3, 5, 7}, 2, "spread", None),
    # 2 over 4 NUMA nodes: one each on the two freest (ties: lower id), none on the others
    ("spread fewer CPUs than NUMA nodes", DUAL_SOCKET_MULTI_NUMA_HT, cpus("0-79") - {0, 40}, 2, "spread",
     {10, 20}),
    # auto with no load figures walks NUMA nodes in id order: numa0's 6, then 1 on numa1
    ("auto fills NUMA nodes in order", DUAL_SOCKET_HT, cpus("0-11"), 7, "auto", {0, 2, 4, 6, 8, 10, 1}),
    ("auto fails beyond the available total", DUAL_SOCKET_HT, {0, 1}, 3, "auto", None),
    ("packed through pick_cpus", SINGLE_SOCKET_HT, cpus("0-7"), 2, "packed", {0, 4}),
]


@pytest.mark.parametrize("description, topology, available, count, policy, expected", POLICY_CASES,
                         ids=[c[0] for c in POLICY_CASES])
def test_policies(description, topology, available, count, policy, expected):
    result = pick_cpus(topology, available, count, policy=policy)
    if expected is None:
        assert result.cpus is None and result.reason
    else:
        assert result.cpus == sorted(expected), result.reason


def test_spread_failure_names_the_short_numa_node():
    # numa0 has only cpu 0 free but its share of 4 is 2
    result = pick_cpus(DUAL_SOCKET_HT, {0, 1, 3, 5, 7, 9, 11}, 4, policy="spread")
    assert "numa 0 has 1 for its share 2" in result.reason


def test_unknown_policy_is_a_value_error():
    with pytest.raises(ValueError, match="unknown policy 'random'"):
        pick_cpus(SINGLE_SOCKET_HT, cpus("0-7"), 1, policy="random")


def test_single_numa_and_auto_prefer_the_least_loaded_numa_node():
    loads = {0: 0.9, 1: 0.1}
    assert pick_cpus(DUAL_SOCKET_HT, cpus("0-11"), 2, "single-numa", numa_load=loads).cpus == [1, 7]
    # the walk takes numa1's 6 first, then numa0's packed choice for the 7th
    assert pick_cpus(DUAL_SOCKET_HT, cpus("0-11"), 7, "auto", numa_load=loads).cpus == [0, 1, 3, 5, 7, 9, 11]


def test_the_counts_are_placements():
    # the node agent is handed placement's counts: pick_cpus must give CPUs in exactly those shares
    free = np.array([[3, 5, 0, 6]])
    available = {cpu for n, want in enumerate(free[0])
                 for cpu in sorted(c.cpu for c in DUAL_SOCKET_MULTI_NUMA_HT if c.numa == n)[:want]}
    loads = np.array([[0.5, 0.2, 0.1, 0.7]])
    for policy in ("spread", "single-numa", "auto"):
        for count in range(1, 15):
            want = distribute(policy, count, free, loads, np.ones(free.shape, dtype=bool))
            result = pick_cpus(DUAL_SOCKET_MULTI_NUMA_HT, available, count, policy,
                               numa_load=dict(enumerate(loads[0].tolist())))
            assert result.ok == bool(want.feasible[0]), (policy, count, result.reason)
            if result.ok:
                got = [sum(1 for c in DUAL_SOCKET_MULTI_NUMA_HT if c.cpu in result.cpus and c.numa == n)
                       for n in range(4)]
                assert got == want.counts[0].tolist(), (policy, count)


@pytest.mark.parametrize("count", [-1, -5])
def test_negative_count_is_a_value_error(count):
    with pytest.raises(ValueError, match="count must be >= 0"):
        pick_cpus(SINGLE_SOCKET_HT, cpus("0-7"), count)


def test_duplicate_cpu_in_topology_is_a_value_error():
    with pytest.raises(ValueError, match="cpu 0 appears twice"):
        take_packed(machine({0: (0, 0, 0)}) * 2, {0}, 1)


# -- per-NUMA counts from a placement decision -------------------------------

PER_NUMA_CASES = [
    ("2 + 2 on dual socket", DUAL_SOCKET_HT, cpus("0-11"), {0: 2, 1: 2}, {0, 6, 1, 7}),
    # 3 on numa 2 of the multi-NUMA machine: a whole core (20,60) then the next thread 21
    ("3 on one NUMA node", DUAL_SOCKET_MULTI_NUMA_HT, cpus("0-79"), {2: 3}, {20, 60, 21}),
    ("zero counts are skipped", DUAL_SOCKET_HT, cpus("0-11"), {0: 0, 1: 1}, {1}),
    ("numa short of its count", DUAL_SOCKET_HT, {0, 1, 3}, {0: 2}, None),
    ("numa not in the topology", DUAL_SOCKET_HT, cpus("0-11"), {5: 1}, None),
]


@pytest.mark.parametrize("description, topology, available, counts, expected", PER_NUMA_CASES,
                         ids=[c[0] for c in PER_NUMA_CASES])
def test_pick_per_numa(description, topology, available, counts, expected):
    result = pick_per_numa(topology, available, counts)
    if expected is None:
        assert result.cpus is None and "numa" in result.reason
    else:
        assert result.cpus == sorted(expected)


# -- properties over random availability -------------------------------------

@settings(max_examples=200, deadline=None)
@given(free=st.sets(st.integers(0, 79)), count=st.integers(0, 80),
       policy=st.sampled_from(POLICIES))
def test_any_success_is_count_distinct_available_cpus(free, count, policy):
    result = pick_cpus(DUAL_SOCKET_MULTI_NUMA_HT, free, count, policy=policy)
    if policy == "packed":
        assert result.ok == (count <= len(free))  # packed only fails when too few are free
    if result.ok:
        assert len(result.cpus) == count == len(set(result.cpus))
        assert set(result.cpus) <= free
    if result.ok and policy == "single-numa":
        assert len({c.numa for c in DUAL_SOCKET_MULTI_NUMA_HT if c.cpu in result.cpus}) <= 1


@settings(max_examples=100, deadline=None)
@given(free=st.sets(st.integers(0, 79), min_size=1))
def test_packed_whole_free_cores_before_single_threads(free):
    # an even request never breaks a whole free core while a partly-used core is taken instead
    count = 2
    result = take_packed(DUAL_SOCKET_MULTI_NUMA_HT, free, count)
    whole_cores = [c for c in range(40) if {c, c + 40} <= free]
    if result.ok and whole_cores:
        assert {result.cpus[0] % 40} == {result.cpus[1] % 40}  # both threads of one core
