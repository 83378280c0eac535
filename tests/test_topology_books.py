"""The node agent's books (pure): claims tied to their bind, exclusive CPUs
released on every way a bind can end, moves that keep the accounting, the
cpuset every pod cgroup should have, and the audit of books against cgroups.

Machine: 8 CPUs, NUMA 0 = 0-3, NUMA 1 = 4-7, cores {0,1} {2,3} {4,5} {6,7};
cpu 0 reserved (it stays in the shared pool, as in kubelet)."""

from __future__ import annotations

import hashlib
import json

import pytest

from builders import pod
from test_topology_cgroups import OTHER, UID, v1_pod
from tidal_cli import main as cli
from tidal_schemas import BindResult, Cpu, PlacementDecision
from tidal_topology import books
from tidal_topology.audit import audit, counts
from tidal_topology.checkpoint import Claim, decode_state, encode_state, new_state, save_state
from tidal_topology.cpuset_plan import Pinning, expected_cpusets
from tidal_topology.kubelet import check_kubelet
from tidal_topology.node_pods import NodePods, PodElsewhere

NODE = "n1"
TOPO = [Cpu(cpu=c, core=c // 2, socket=c // 4, numa=c // 4) for c in range(8)]
NUMA_OF = {c.cpu: c.numa for c in TOPO}
MEMS = frozenset({0, 1})
UID_A, UID_B, UID_C = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002", \
    "cccccccc-0000-0000-0000-000000000003"
T0 = 1000.0


def decision(name: str, did: str, node: str = NODE, numa_cpus=None, numa_nodes=(), outcome="placed", uid=""):
    return PlacementDecision(decision_id=did, namespace="ns", name=name, outcome=outcome, uid=uid,
                             node=node if outcome == "placed" else None, numa_cpus=numa_cpus or {},
                             numa_nodes=list(numa_nodes))


def lifecycle(name: str, phase: str, node: str | None = NODE, uid: str = UID_A, did: str = "", **fields):
    return pod(name, namespace="ns", phase=phase, node=node, uid=uid, decision_id=did, **fields)


def decided(state, name="a", did="d1", numa_cpus=None, numa_nodes=(), seen=None, now=T0, uid=""):
    step = books.on_decision(state, decision(name, did, numa_cpus=numa_cpus, numa_nodes=numa_nodes, uid=uid),
                             NODE, TOPO, now, seen)
    assert not step.refused, step.refused
    return step


FRESH = new_state(range(8), {0})


def test_a_decision_takes_packed_cpus_per_numa_and_announces_them():
    # 2 CPUs on NUMA 1: the whole free core {4, 5} (kubelet packed)
    step = decided(FRESH, numa_cpus={1: 2})
    assert step.state.held_by("ns/a") == {4, 5}
    assert step.state.claims["ns/a"] == Claim("", "d1", (1,), "decided", T0)
    [given] = step.changes
    assert (given.cpus, given.released, dict(given.numa_cpus), given.decision_id) == ((4, 5), False, {1: 2}, "d1")


def test_the_same_decision_again_changes_nothing():
    state = decided(FRESH, numa_cpus={1: 2}).state
    again = books.on_decision(state, decision("a", "d1", numa_cpus={1: 2}), NODE, TOPO, T0 + 5, None)
    assert not again.changed and again.state is state


def test_a_new_decision_replaces_the_old_assignment():
    state = decided(FRESH, numa_cpus={1: 2}).state
    step = decided(state, did="d2", numa_cpus={0: 1})
    # released {4,5}, then 1 CPU on NUMA 0 from {1,2,3}: the lone thread 1 (its core-mate 0 is reserved)
    assert step.state.held_by("ns/a") == {1}
    assert [(c.cpus, c.released) for c in step.changes] == [((4, 5), True), ((1,), False)]
    assert step.state.claims["ns/a"].decision_id == "d2"


RELEASES = [
    # (what happens after decision d1 for ns/a took {4,5}, the reason words)
    ("bind failed", lambda s: books.on_bind_result(s, BindResult(decision_id="d1", namespace="ns", name="a",
                                                                  node=NODE, ok=False, reason="node gone"), NODE),
     "bind failed: node gone"),
    ("bind timeout", lambda s: books.expire(s, T0 + 60, 60), "no bind within 60s"),
    ("bound to another node", lambda s: books.on_pod(s, lifecycle("a", "bound", node="n2", did="d1"), NODE, TOPO,
                                                     T0, adopt=True), "bound to n2"),
    ("deleted", lambda s: books.on_pod(s, lifecycle("a", "deleted", did="d1"), NODE, TOPO, T0, adopt=True),
     "pod deleted"),
    ("deleted on another node", lambda s: books.on_pod(s, lifecycle("a", "deleted", node="n2"), NODE, TOPO, T0,
                                                       adopt=True), "pod deleted"),
    ("placed elsewhere", lambda s: books.on_decision(s, decision("a", "d2", node="n2"), NODE, TOPO, T0, None),
     "placed on n2"),
    ("given up", lambda s: books.on_decision(s, decision("a", "d2", outcome="pending"), NODE, TOPO, T0, None),
     "gave the decision up"),
]


@pytest.mark.parametrize("what, event, words", RELEASES, ids=[r[0] for r in RELEASES])
def test_every_end_of_a_bind_returns_the_cpus(what, event, words):
    state = decided(FRESH, numa_cpus={1: 2}).state
    step = event(state)
    assert step.changed and not step.state.assignments and "ns/a" not in step.state.claims
    [freed] = step.changes
    assert (freed.cpus, freed.released, freed.decision_id) == ((4, 5), True, "d1") and words in freed.reason
    # the next exclusive pod gets them
    assert decided(step.state, name="b", did="d9", numa_cpus={1: 2}).state.held_by("ns/b") == {4, 5}


KEPT = [
    ("bind ok", lambda s: books.on_bind_result(s, BindResult(decision_id="d1", namespace="ns", name="a", node=NODE,
                                                              ok=True), NODE), "bound"),
    ("bound here", lambda s: books.on_pod(s, lifecycle("a", "bound", did="d1"), NODE, TOPO, T0, adopt=True),
     "bound"),
    ("running here", lambda s: books.on_pod(s, lifecycle("a", "running", did="d1"), NODE, TOPO, T0, adopt=True),
     "running"),
    ("a failed bind of another decision", lambda s: books.on_bind_result(s, BindResult(
        decision_id="d0", namespace="ns", name="a", node=NODE, ok=False), NODE), "decided"),
    ("not yet timed out", lambda s: books.expire(s, T0 + 59, 60), "decided"),
    ("an older pod of that name deleted", lambda s: books.on_pod(
        books.on_pod(s, lifecycle("a", "bound", did="d1"), NODE, TOPO, T0, adopt=True).state,
        lifecycle("a", "deleted", uid=UID_B), NODE, TOPO, T0, adopt=True), "bound"),
]


@pytest.mark.parametrize("what, event, stage", KEPT, ids=[k[0] for k in KEPT])
def test_what_keeps_the_cpus(what, event, stage):
    state = decided(FRESH, numa_cpus={1: 2}).state
    after = event(state).state
    assert after.held_by("ns/a") == {4, 5} and after.claims["ns/a"].stage == stage


def test_a_confirmed_claim_learns_the_uid_and_never_times_out():
    state = decided(FRESH, numa_cpus={1: 2}).state
    state = books.on_pod(state, lifecycle("a", "running", did="d1"), NODE, TOPO, T0, adopt=True).state
    assert state.claims["ns/a"].uid == UID_A
    assert books.expire(state, T0 + 10_000, 60).state.held_by("ns/a") == {4, 5}


def test_a_decision_other_than_the_one_the_pod_is_bound_by_is_ignored():
    seen = lifecycle("a", "running", did="d2")
    step = books.on_decision(FRESH, decision("a", "d1", numa_cpus={1: 1}), NODE, TOPO, T0, seen)
    assert not step.changed and "bound by d2" in step.note


# The agent's pod table keeps a pod of another node only as `PodElsewhere`
# (its ids packed when they are UUIDs): every decision must meet the same
# answer as with the pod's whole event.
DID = "7d0c3b9e-1f2a-5c4d-8e6f-0a1b2c3d4e5f"
SEEN = [lifecycle(name, phase, node=node, uid=uid, did=did)
        for name in ("a", "b") for phase in ("pending", "bound", "running")
        for node in ((None, NODE, "n2") if phase == "pending" else (NODE, "n2"))
        for uid in (UID_A, UID_B, "") for did in ("", "d1", "d2", DID)]


@pytest.mark.parametrize("outcome, node", [("placed", NODE), ("placed", "n2"), ("pending", None)])
@pytest.mark.parametrize("start", ["fresh", "decided", "bound"])
def test_the_pod_tables_record_of_a_pod_answers_every_decision_as_its_event(outcome, node, start):
    state = {"fresh": FRESH, "decided": decided(FRESH, numa_cpus={1: 2}).state,
             "bound": decided(FRESH, numa_cpus={1: 2}, seen=lifecycle("a", "bound", did="d1")).state}[start]
    for seen in SEEN:
        table = NodePods(NODE)
        table.apply(seen)
        kept = table.get(seen.event_key())
        assert isinstance(kept, PodElsewhere) == (seen.node != NODE)
        if isinstance(kept, PodElsewhere):
            assert (kept.uid, kept.decision_id) == (seen.uid, seen.decision_id)
        for did, uid in (("d1", ""), ("d2", UID_A), ("d3", UID_B), (DID, UID_A)):
            d = decision("a", did, node=node or NODE, numa_cpus={1: 1}, outcome=outcome, uid=uid)
            with_record, with_event = (books.on_decision(state, d, NODE, TOPO, T0, pod) for pod in (kept, seen))
            assert with_record == with_event


def test_a_decision_for_a_pod_the_table_knows_bound_elsewhere_is_ignored():
    table = NodePods(NODE)
    table.apply(lifecycle("a", "running", node="n2", did="d2"))
    step = books.on_decision(FRESH, decision("a", "d1", numa_cpus={1: 1}), NODE, TOPO, T0, table.get("ns/a"))
    assert not step.changed and "bound by d2" in step.note


def test_a_decision_read_after_its_pod_runs_here_is_confirmed_at_once():
    step = decided(FRESH, numa_cpus={1: 1}, seen=lifecycle("a", "running", did="d1"))
    assert step.state.claims["ns/a"].stage == "running" and step.state.claims["ns/a"].uid == UID_A


def test_a_tidal_pod_bound_here_without_a_claim_is_adopted_from_what_it_carries():
    step = books.on_pod(FRESH, lifecycle("a", "running", did="d7", numa_cpus={1: 1}), NODE, TOPO, T0, adopt=True)
    assert step.state.held_by("ns/a") == {4} and step.state.claims["ns/a"].decision_id == "d7"
    foreign = books.on_pod(FRESH, lifecycle("f", "running", did="", foreign=True), NODE, TOPO, T0, adopt=True)
    assert not foreign.changed
    off = books.on_pod(FRESH, lifecycle("a", "running", did="d7", numa_cpus={1: 1}), NODE, TOPO, T0, adopt=False)
    assert not off.changed


def test_a_shared_pod_adopted_before_its_decision_learns_its_numa_nodes_from_it():
    # the pod's running event overtook its decision: the pod carries no NUMA
    # node (it holds no exclusive CPU), the decision names NUMA 1
    adopted = books.on_pod(FRESH, lifecycle("a", "running", did="d1"), NODE, TOPO, T0, adopt=True).state
    assert adopted.claims["ns/a"].numa_nodes == ()
    step = decided(adopted, numa_nodes=[1])
    assert step.changed and step.state.claims["ns/a"].numa_nodes == (1,) and not step.changes
    assert expected_cpusets(step.state, [UID_A], NUMA_OF, MEMS, manage_all=True)[UID_A].cpus == (4, 5, 6, 7)
    # read again, or after a move set them, the NUMA nodes stay
    assert not decided(step.state, numa_nodes=[1]).changed
    moved = books.move(step.state, "ns/a", UID_A, target=0, count=0, topology=TOPO).state
    assert decided(moved, numa_nodes=[1]).state.claims["ns/a"].numa_nodes == (0,)


def test_a_decision_that_cannot_be_honoured_is_refused_with_the_reason():
    state = decided(FRESH, numa_cpus={1: 4}).state
    step = books.on_decision(state, decision("b", "d2", numa_cpus={1: 1}), NODE, TOPO, T0, None)
    assert "numa 1: not enough cpus available" in step.refused and not step.state.held_by("ns/b")


# ---------------------------------------------------------------- moves ----

def running(state, name="a", did="d1", uid=UID_A):
    return books.on_pod(state, lifecycle(name, "running", did=did, uid=uid), NODE, TOPO, T0, adopt=True).state


def test_a_move_re_takes_as_many_cpus_on_the_target_and_the_old_ones_go_back():
    state = running(decided(FRESH, numa_cpus={0: 2}).state)
    assert state.held_by("ns/a") == {2, 3}
    step = books.move(state, "ns/a", UID_A, target=1, count=2, topology=TOPO)
    assert step.state.held_by("ns/a") == {4, 5} and step.state.claims["ns/a"].numa_nodes == (1,)
    [moved] = step.changes
    assert (moved.cpus, dict(moved.numa_cpus), moved.decision_id) == ((4, 5), {1: 2}, "d1")
    # the next exclusive pod on NUMA 0 gets the CPUs the moved pod left, never those it holds now
    b = decided(step.state, name="b", did="d2", numa_cpus={0: 2}, uid=UID_B).state
    assert b.held_by("ns/b") == {2, 3}
    assert "not enough cpus" in books.on_decision(b, decision("c", "d3", numa_cpus={1: 3}), NODE, TOPO, T0,
                                                  None).refused
    # a later running event of the moved pod does not undo the move
    assert running(step.state).held_by("ns/a") == {4, 5}


MOVE_REFUSALS = [
    ("unknown NUMA node", dict(target=5, count=2), "NUMA node 5 is not on this node"),
    ("wrong count", dict(target=1, count=3), "holds 2 exclusive CPUs, not 3"),
    ("target full", dict(target=1, count=2), "has 1 CPU(s) free for the 2"),
]


@pytest.mark.parametrize("what, ask, words", MOVE_REFUSALS, ids=[m[0] for m in MOVE_REFUSALS])
def test_moves_the_books_cannot_honour_are_refused(what, ask, words):
    state = running(decided(FRESH, numa_cpus={0: 2}).state)
    if what == "target full":
        state = decided(state, name="x", did="dx", numa_cpus={1: 3}).state
    step = books.move(state, "ns/a", UID_A, topology=TOPO, **ask)
    assert not step.changed and words in step.refused and step.state is state


def test_a_shared_pod_is_moved_by_pinning_it_to_the_targets_shared_cpus():
    step = books.move(FRESH, "ns/s", UID_C, target=1, count=0, topology=TOPO)
    assert step.changed and not step.changes and step.state.claims["ns/s"].numa_nodes == (1,)
    assert "holds no exclusive CPUs" in books.move(FRESH, "ns/s", UID_C, 1, 2, TOPO).refused
    gone = books.on_pod(step.state, lifecycle("s", "deleted", uid=UID_C), NODE, TOPO, T0, adopt=True)
    assert "ns/s" not in gone.state.claims


# -------------------------------------------------- expected cpusets -------

def test_expected_cpusets_follow_kubelets_static_policy_and_the_chosen_numa_nodes():
    state = running(decided(FRESH, numa_cpus={1: 2}).state)  # a: {4, 5}
    state = running(decided(state, name="s", did="d2", numa_nodes=[0]).state, name="s", did="d2", uid=UID_B)
    expected = expected_cpusets(state, [UID_A, UID_B, UID_C], NUMA_OF, MEMS, manage_all=True)
    assert expected == {
        UID_A: Pinning((4, 5), (1,), "ns/a"),           # its exclusive CPUs, memory of NUMA 1
        UID_B: Pinning((0, 1, 2, 3), (0,), "ns/s"),     # shared ∩ NUMA 0 (reserved 0 stays shared)
        UID_C: Pinning((0, 1, 2, 3, 6, 7), (0, 1)),    # a pod the books do not name: the shared pool
    }
    # without exclusive CPUs on the node, pods the books do not name are left alone
    assert UID_C not in expected_cpusets(state, [UID_C], NUMA_OF, MEMS, manage_all=False)


def test_a_numa_node_with_no_shared_cpu_left_falls_back_to_the_whole_shared_pool():
    state = running(decided(FRESH, numa_cpus={1: 4}).state)
    state = running(decided(state, name="s", did="d2", numa_nodes=[1]).state, name="s", did="d2", uid=UID_B)
    assert expected_cpusets(state, [UID_B], NUMA_OF, MEMS, True)[UID_B] == Pinning((0, 1, 2, 3), (0, 1), "ns/s")


def test_memory_nodes_the_machine_lacks_are_never_written():
    state = running(decided(FRESH, numa_cpus={1: 1}).state)
    # a NUMA override declared NUMA 1, but the machine has memory node 0 only
    assert expected_cpusets(state, [UID_A], NUMA_OF, frozenset({0}), True)[UID_A].mems == (0,)


# ---------------------------------------------------------------- audit ----

def test_the_audit_finds_each_kind_of_violation():
    state = running(decided(FRESH, numa_cpus={1: 2}).state)  # a: {4, 5}
    expected = expected_cpusets(state, [UID_A, UID_C], NUMA_OF, MEMS, True)
    clean = {UID_A: (4, 5), UID_C: (0, 1, 2, 3, 6, 7)}
    assert audit(state, expected, clean, live={"ns/a"}) == []
    leaked = audit(state, expected, {**clean, UID_C: tuple(range(8))}, live={"ns/a"})
    assert counts(leaked) == {"double-booked": 0, "leaked": 1, "orphaned": 0, "drifted": 1}
    assert "runs on cpus 4-5 held by ns/a" in leaked[0].detail
    two = audit(state, expected, {**clean, UID_C: (4,)}, live={"ns/a"})  # not exclusive: leaked, not double
    assert counts(two)["leaked"] == 1
    orphaned = audit(state, expected, {UID_C: clean[UID_C]}, live=set())
    assert counts(orphaned) == {"double-booked": 0, "leaked": 0, "orphaned": 1, "drifted": 0}
    # a claim awaiting its bind is not judged: the bind timeout ends it
    waiting = decided(FRESH, name="w", did="dw", numa_cpus={1: 1}).state
    assert audit(waiting, {}, {}, live=set()) == []


def test_the_audit_counts_an_exclusive_cpu_in_two_exclusive_pods_as_double_booked():
    state = running(decided(FRESH, numa_cpus={1: 1}).state)
    state = running(decided(state, name="b", did="d2", numa_cpus={1: 1}, uid=UID_B).state, name="b", did="d2",
                    uid=UID_B)
    a, b = sorted(state.held_by("ns/a")), sorted(state.held_by("ns/b"))
    expected = expected_cpusets(state, [UID_A, UID_B], NUMA_OF, MEMS, True)
    found = counts(audit(state, expected, {UID_A: tuple(a), UID_B: tuple(a + b)}, live={"ns/a", "ns/b"}))
    assert found["double-booked"] == 1 and found["leaked"] == 1 and found["drifted"] == 1


# ----------------------------------------------------------- checkpoint ----

def test_claims_survive_the_checkpoint_and_version_1_files_still_load():
    state = running(decided(FRESH, numa_cpus={1: 2}, numa_nodes=[1]).state)
    assert decode_state(encode_state(state)).state == state
    v1 = b'{"version": 1, "checksum": "%s", "data": %s}'
    data = b'{"cpus": "0-7", "reserved": "0", "assignments": {"ns/a": {"": "4-5"}}}'
    checksum = "sha256:" + hashlib.sha256(json.dumps(json.loads(data), sort_keys=True,
                                                     separators=(",", ":")).encode()).hexdigest()
    loaded = decode_state(v1 % (checksum.encode(), data)).state
    assert loaded.held_by("ns/a") == {4, 5} and loaded.claims["ns/a"].stage == "bound"


KUBELET = [
    # (checkpoint text or None = no file, exclusive CPUs on, may start, words logged)
    ('{"policyName":"none","defaultCpuSet":"","checksum":1}', True, True, ""),
    ('{"policyName":"static","defaultCpuSet":"0-7","checksum":1}', True, False, "cpu-manager-policy=static"),
    ('{"policyName":"static"}', False, True, ""),
    (None, True, True, "cannot check that kubelet runs --cpu-manager-policy=none"),
    ("{not json", True, True, "unreadable"),
]


@pytest.mark.parametrize("text, exclusive, may_start, words", KUBELET)
def test_the_agent_requires_kubelets_none_cpu_manager_policy(tmp_path, text, exclusive, may_start, words):
    path = tmp_path / "cpu_manager_state"
    if text is not None:
        path.write_text(text)
    started, why = check_kubelet(path, exclusive)
    assert started == may_start and words in why and bool(why) == bool(words)


def test_the_node_audit_command_reads_the_books_and_the_cgroup_files(tmp_path, capsys):
    # machine: cpu0 = NUMA 0, cpu1 = NUMA 1; ns/a (uid UID) holds cpu1
    two = [Cpu(cpu=0, core=0, socket=0, numa=0), Cpu(cpu=1, core=1, socket=1, numa=1)]
    state = books.on_decision(new_state([0, 1]), decision("a", "d1", numa_cpus={1: 1}), NODE, two, T0, None).state
    state = books.on_pod(state, lifecycle("a", "running", did="d1", uid=UID), NODE, two, T0, adopt=True).state
    assert state.held_by("ns/a") == {1}
    save_state(state, tmp_path / "books.json")
    fs = v1_pod(tmp_path / "cg")
    v1_pod(tmp_path / "cg", uid=OTHER)
    args = ["node", "audit", "--state-file", str(tmp_path / "books.json"), "--cgroup-root", str(fs.root),
            "--cgroup-parent", "kubepods", "--cgroup-version", "v1", "--numa-override", "0:0,1:1"]
    cgroup = tmp_path / "cg/cpuset/kubepods/besteffort"
    (cgroup / f"pod{UID}/cpuset.cpus").write_text("1\n")
    (cgroup / f"pod{OTHER}/cpuset.cpus").write_text("0\n")
    assert cli.main(args) == 0
    assert "double-booked 0, leaked 0, orphaned 0, drifted 0" in capsys.readouterr().out
    (cgroup / f"pod{OTHER}/cpuset.cpus").write_text("0-1\n")  # another pod on the exclusive CPU
    assert cli.main(args) == 1
    out = capsys.readouterr().out
    assert f"leaked: uid {OTHER}: runs on cpus 1 held by ns/a" in out and "drifted 1" in out
    (tmp_path / "books.json").write_text("{")
    assert cli.main(args) == 2
    assert "the agent's books are unreadable" in capsys.readouterr().err


def test_a_pod_made_again_under_its_name_keeps_its_cpus_when_the_first_pods_deletion_is_read_late():
    # ns/a ran here by d1; it was deleted and made again (a StatefulSet's pod: another uid), and
    # placement's decision for the new pod is read before the first pod's deletion (another stream)
    state = decided(FRESH, numa_cpus={1: 2}, uid=UID_A).state
    state = books.on_pod(state, lifecycle("a", "running", uid=UID_A, did="d1", numa_cpus={1: 2}), NODE, TOPO,
                         T0, adopt=True).state
    new = books.on_decision(state, decision("a", "d2", numa_cpus={0: 2}, uid=UID_B), NODE, TOPO, T0 + 1, None)
    late = books.on_pod(new.state, lifecycle("a", "deleted", uid=UID_A, did="d1"), NODE, TOPO, T0 + 2, adopt=True)
    assert late.state.claims["ns/a"].uid == UID_B and late.state.held_by("ns/a") == {2, 3}
    # Why placement's ids derive from the uid: the first pod's id again reads as its decision
    # redelivered, the claim stays the first pod's, and its deletion takes the new pod's CPUs.
    same = books.on_decision(state, decision("a", "d1", numa_cpus={0: 2}, uid=UID_B), NODE, TOPO, T0 + 1, None)
    gone = books.on_pod(same.state, lifecycle("a", "deleted", uid=UID_A, did="d1"), NODE, TOPO, T0 + 2, adopt=True)
    assert "ns/a" not in gone.state.claims and not gone.state.held_by("ns/a")
