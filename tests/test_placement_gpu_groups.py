"""§B tenant GPU groups: building (manual, automatic, permissions,
replacement) and best-fit placement inside groups (type, container id,
overlapping groups, the two-node fragmentation example). Quota, and the
group choice under quota, permissions and node fit: test_tenancy_rules."""

from __future__ import annotations

import pytest

from tidal_placement.cluster_state import Allocation, ClusterState
from tidal_placement.gpu_groups import GroupRegistry, build_grouping
from tidal_placement.group_placement import GroupAsk, choose_group, group_mask
from tidal_simulator.topology_builder import make_topology
from tidal_schemas import GpuBinding, GpuGroup, TenantConfig
from tidal_schemas.pod import AutoGrouping, TenantPermissions


def cluster(*topologies) -> tuple[ClusterState, dict]:
    state = ClusterState()
    for t in topologies:
        state.upsert_node(t)
    return state, {t.node: t.gpus for t in topologies}


def group(name, bindings, container=None) -> GpuGroup:
    return GpuGroup(name=name, container_id=container,
                    bindings=[GpuBinding(node=n, gpus=list(g)) for n, g in bindings.items()])


def config(groups=(), quota=None, nodes=(), gpus=(), auto=None, tenant="t1") -> TenantConfig:
    return TenantConfig(tenant=tenant, groups=list(groups), quota=quota or {}, auto_grouping=auto,
                        permissions=TenantPermissions(nodes=list(nodes), gpus=list(gpus)))


def place(state, grouping, ask):
    """Choose, then assume the chosen GPUs as the service would."""
    choice = choose_group(state, grouping, ask)
    if choice.ok:
        gpus = {g: ask.milli for g in choice.gpus}
        assert state.assume(f"{choice.node}/{'-'.join(choice.gpus)}", Allocation.of(choice.node, gpus=gpus)).ok
    return choice


# ---- the worked example: two nodes × 4 GPUs, requests 2, 1, 2, 3 ---------

def first_fit(state: ClusterState, count: int) -> str | None:
    for node in ("a", "b"):
        r = state.rows[node]
        free = [state.gpu_id(r, c) for c in range(4) if state.gpu_free[r, c] == 1000]
        if len(free) >= count:
            state.assume(f"{node}/{free[0]}", Allocation.of(node, gpus={g: 1000 for g in free[:count]}))
            return node
    return None


def test_worked_example_naive_first_fit_strands_1_plus_2():
    state, _ = cluster(make_topology("a", gpus=4), make_topology("b", gpus=4))
    placed = [first_fit(state, d) for d in (2, 1, 2, 3)]
    # 2 → a, 1 → a (a: 1 left), 2 → b (b: 2 left): 1 + 2 free, the 3-GPU container cannot run
    assert placed == ["a", "a", "b", None]
    assert [int(state.gpu_whole[state.rows[n]]) for n in ("a", "b")] == [1, 2]


def test_worked_example_best_fit_alone_cannot_save_this_order():
    # One group over both nodes. Best fit sends the 1-GPU container to the
    # fuller node (leftover 1 < 3), the same choice as first fit: the only
    # order-independent fix is to route containers to groups (next test).
    state, inventory = cluster(make_topology("a", gpus=4), make_topology("b", gpus=4))
    grouping = build_grouping(config([group("all", {"a": [f"gpu{i}" for i in range(4)],
                                                    "b": [f"gpu{i}" for i in range(4)]})]), inventory)
    nodes = [place(state, grouping, GroupAsk(count=d)).node for d in (2, 1, 2, 3)]
    assert nodes == ["a", "a", "b", None]


def test_worked_example_groups_by_container_place_all_four():
    # The tenant groups node a for its 2-GPU containers and node b for the
    # 1- and 3-GPU ones (container identifiers name the groups): 2+2 on a, 1+3 on b.
    state, inventory = cluster(make_topology("a", gpus=4), make_topology("b", gpus=4))
    grouping = build_grouping(config([
        group("pairs", {"a": [f"gpu{i}" for i in range(4)]}, container="pair"),
        group("rest", {"b": [f"gpu{i}" for i in range(4)]}, container="rest"),
    ]), inventory)
    asks = [GroupAsk(2, container="pair"), GroupAsk(1, container="rest"),
            GroupAsk(2, container="pair"), GroupAsk(3, container="rest")]
    choices = [place(state, grouping, ask) for ask in asks]
    assert [c.node for c in choices] == ["a", "b", "a", "b"]
    assert choices[3].gpus == ("gpu1", "gpu2", "gpu3")  # gpu0 went to the 1-GPU container
    assert int(state.gpu_idle[: state.size].sum()) == 0


# ---- best fit, type, container id -------------------------------------------

def test_best_fit_picks_the_group_with_the_smallest_leftover():
    # ask 2: "small" (2 free) leaves 0, "big" (4 free) leaves 2 → small
    state, inventory = cluster(make_topology("n1", gpus=2), make_topology("n2", gpus=4))
    grouping = build_grouping(config([group("big", {"n2": ["gpu0", "gpu1", "gpu2", "gpu3"]}),
                                      group("small", {"n1": ["gpu0", "gpu1"]})]), inventory)
    choice = choose_group(state, grouping, GroupAsk(2))
    assert (choice.group, choice.node, choice.gpus, choice.leftover) == ("small", "n1", ("gpu0", "gpu1"), 0)


@pytest.mark.parametrize("models, node", [(("T4",), "n2"), (("A100",), "n1"), (("V100",), None)])
def test_type_constraint(models, node):
    state, inventory = cluster(make_topology("n1", gpus=2, model="A100"), make_topology("n2", gpus=2, model="T4"))
    grouping = build_grouping(config(auto=AutoGrouping(by_model=True)), inventory)
    choice = choose_group(state, grouping, GroupAsk(1, models=models))
    assert choice.node == node
    if node is None:
        assert "requested type" in choice.reason


def test_container_id_selects_the_group():
    state, inventory = cluster(make_topology("n1", gpus=2), make_topology("n2", gpus=2))
    grouping = build_grouping(config([group("g1", {"n1": ["gpu0", "gpu1"]}, container="train"),
                                      group("g2", {"n2": ["gpu0", "gpu1"]}, container="serve")]), inventory)
    assert choose_group(state, grouping, GroupAsk(1, container="serve")).node == "n2"
    assert choose_group(state, grouping, GroupAsk(1, container="g1")).node == "n1"  # by group name
    assert not choose_group(state, grouping, GroupAsk(1, container="other")).ok


def test_shares_pack_inside_a_group():
    # gpu0 already holds 600 → a 300 share goes there (400 left, best fit), not to gpu1
    state, inventory = cluster(make_topology("n1", gpus=2))
    state.assume("x", Allocation.of("n1", gpus={"gpu0": 600}))
    grouping = build_grouping(config([group("g", {"n1": ["gpu0", "gpu1"]})]), inventory)
    assert choose_group(state, grouping, GroupAsk(1, milli=300)).gpus == ("gpu0",)


# ---- overlapping groups: accounting per GPU ------------------------------------

def test_overlapping_groups_never_double_count_a_gpu():
    # g1 = {gpu0, gpu1}, g2 = {gpu1, gpu2} share gpu1 on n1.
    state, inventory = cluster(make_topology("n1", gpus=3))
    grouping = build_grouping(config([group("g1", {"n1": ["gpu0", "gpu1"]}),
                                      group("g2", {"n1": ["gpu1", "gpu2"]})]), inventory)
    first = place(state, grouping, GroupAsk(2, container="g1"))
    assert first.gpus == ("gpu0", "gpu1")
    # gpu1 is used through g1, so g2 has one free GPU, not two
    assert not choose_group(state, grouping, GroupAsk(2, container="g2")).ok
    assert choose_group(state, grouping, GroupAsk(1, container="g2")).gpus == ("gpu2",)


def test_group_mask_allows_only_the_chosen_gpus():
    state, inventory = cluster(make_topology("n1", gpus=3))
    grouping = build_grouping(config([group("g", {"n1": ["gpu1", "gpu2"]})]), inventory)
    mask = group_mask(state, choose_group(state, grouping, GroupAsk(1)))
    assert mask[state.rows["n1"], :3].tolist() == [False, True, False]


# ---- building groups: permissions, automatic, replacement -------------------------

def test_permissions_filter_manual_groups_with_reasons():
    state, inventory = cluster(make_topology("n1", gpus=2), make_topology("n2", gpus=2))
    grouping = build_grouping(config([group("g", {"n1": ["gpu0", "gpu1", "gpu9"], "n2": ["gpu0"]})],
                                     nodes=["n1"], gpus=["gpu0"]), inventory)
    assert grouping.groups[0].gpus == frozenset({("n1", "gpu0")})
    assert sorted(grouping.dropped) == ["g: n1/gpu1 is not permitted", "g: n1/gpu9 is not a GPU of that node",
                                        "g: n2/gpu0 is not permitted"]


def test_group_with_nothing_permitted_is_dropped():
    _, inventory = cluster(make_topology("n1", gpus=1))
    grouping = build_grouping(config([group("g", {"n1": ["gpu0"]})], nodes=["n2"]), inventory)
    assert grouping.groups == () and "group dropped" in grouping.dropped[-1]


@pytest.mark.parametrize("auto, expected", [
    (AutoGrouping(by_model=True), {"auto-A100-any": 3, "auto-T4-any": 4}),
    (AutoGrouping(by_model=False), {"auto-any-any": 7}),
    (AutoGrouping(by_model=True, by_kind=True), {"auto-A100-physical": 2, "auto-A100-virtual": 1,
                                                 "auto-T4-physical": 4}),
    # 4 per container: n1 has only 3 A100 devices → left out; n2 has 4 T4 → kept
    (AutoGrouping(by_model=True, gpus_per_container=4), {"auto-T4-any-x4": 4}),
])
def test_automatic_grouping(auto, expected):
    _, inventory = cluster(make_topology("n1", gpus=2, virtual=1, model="A100"),
                           make_topology("n2", gpus=4, model="T4"))
    grouping = build_grouping(config(auto=auto), inventory)
    assert {g.name: len(g.gpus) for g in grouping.groups} == expected


def test_automatic_grouping_respects_permissions():
    _, inventory = cluster(make_topology("n1", gpus=2, model="A100"), make_topology("n2", gpus=4, model="T4"))
    grouping = build_grouping(config(auto=AutoGrouping(by_model=True), nodes=["n2"], gpus=["gpu0", "gpu1"]),
                              inventory)
    assert [(g.name, sorted(g.gpus)) for g in grouping.groups] == [("auto-T4-any", [("n2", "gpu0"), ("n2", "gpu1")])]


def test_new_config_replaces_the_old_grouping():
    _, inventory = cluster(make_topology("n1", gpus=2))
    registry = GroupRegistry()
    registry.apply(config([group("old", {"n1": ["gpu0"]})]), inventory)
    registry.apply(config([group("new", {"n1": ["gpu1"]})]), inventory)
    assert [g.name for g in registry.get("t1").groups] == ["new"]
    registry.forget("t1")
    assert registry.get("t1") is None
