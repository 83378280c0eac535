"""The node agent against hostile event data: actions for pods it does not
own are answered with the reason and touch nothing, and no pod uid,
namespace, name, container or parent — however malformed (`..`, `/`, NUL,
very long, symlinks) — makes it read or write outside the cgroup root.
Table-driven cases first, then Hypothesis-generated names."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_topology_cgroups import OTHER, UID, outside_target, v1_pod, write
from tidal_schemas import NodeAction, PodLifecycle
from tidal_topology import cgroups
from tidal_topology.cgroup_paths import inside, list_pod_dirs
from tidal_topology.cgroups import CgroupFs, freeze_pod, pod_cpuset, pod_frozen, set_pod_cpuset, thaw_pod
from tidal_topology.node_pods import NodePods
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

NODE = "node-a"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def lifecycle(name: str, *, uid: str = UID, node: str | None = NODE, phase: str = "running", namespace: str = "ns",
              **fields) -> PodLifecycle:
    return PodLifecycle.model_construct(namespace=namespace, name=name, uid=uid, phase=phase, node=node,
                                        created_at=NOW, system_critical=fields.get("system_critical", False))


# ------------------------------------------------------- who owns a pod ----

OWNERSHIP = [
    # (pods the agent knows, the action's pod, expected status or None = may act, words in the reason)
    ([], "ns/ghost", "unknown-pod", "no pod 'ns/ghost' known"),
    ([lifecycle("p", node="node-b")], "ns/p", "refused", "runs on node-b, not on node-a"),
    ([lifecycle("p", node=None, phase="pending")], "ns/p", "refused", "is not placed on any node"),
    ([lifecycle("p", phase="pending")], "ns/p", "refused", "is pending, not bound or running"),
    ([lifecycle("p", uid="")], "ns/p", "refused", "pod uid '' is not a UUID"),
    ([lifecycle("p", uid="../../../../etc")], "ns/p", "refused", "is not a UUID"),
    ([lifecycle("p", uid=f"{UID}/../{OTHER}")], "ns/p", "refused", "is not a UUID"),
    ([lifecycle("p", uid=UID + "\x00")], "ns/p", "refused", "is not a UUID"),
    ([lifecycle("p"), lifecycle("q")], "ns/p", "refused", "also claimed by 'ns/q'"),
    ([lifecycle("p")], "ns/p/../q", "unknown-pod", "no pod"),
    ([lifecycle("p")], None, "unknown-pod", "no pod None"),
    ([lifecycle("p")], "ns/p", None, ""),
    ([lifecycle("p", phase="bound")], "ns/p", None, ""),
    # the table keeps a pod whole on this node only: one that moves, or comes, or goes
    ([lifecycle("p"), lifecycle("p", node="node-b")], "ns/p", "refused", "runs on node-b, not on node-a"),
    ([lifecycle("p", node="node-b"), lifecycle("p")], "ns/p", None, ""),
    ([lifecycle("p"), lifecycle("p", phase="deleted")], "ns/p", "unknown-pod", "no pod 'ns/p' known"),
    ([lifecycle("p", node="node-b"), lifecycle("p", node="node-b", phase="deleted")], "ns/p", "unknown-pod", "no pod"),
]


@pytest.mark.parametrize("pods, key, status, words", OWNERSHIP)
def test_ownership(pods, key, status, words):
    table = NodePods(NODE)
    for pod in pods:
        table.apply(pod)
    pod, refusal, why = table.owned(key)
    assert refusal == status and words in why
    assert (pod is None) == (status is not None)


def test_reasons_quote_hostile_names_briefly():
    table = NodePods(NODE)
    _, status, why = table.owned("ns/" + "x" * 100_000 + "\x00")
    assert status == "unknown-pod" and len(why) < 200 and "\x00" not in why


# ------------------------------------------- through the agent's actions ---

@pytest.fixture
def agent(tmp_path):
    """A node agent whose cgroup root is a temp v1 tree holding pod UID, and
    a decoy pod directory outside the root."""
    root = tmp_path / "cg"
    v1_pod(root, containers=("ctr",))
    decoy = outside_target(tmp_path)
    settings = TopologySettings(node_name=NODE, cluster="c1", numa_override="0:0,1:1", cgroup_root=str(root),
                                cgroup_parent="kubepods", cgroup_version="v1", state_file=str(tmp_path / "s.json"))
    service = TopologyService(settings, bus=object())
    service.cpus.live = True  # as once the pod table has caught up: changes are written to the cgroups
    return service, root, decoy


def snapshot(directory: Path) -> dict[str, str]:
    return {str(p): p.read_text() for p in sorted(directory.rglob("*")) if p.is_file() and not p.is_symlink()}


ACTIONS = [
    # (pods known, action fields, expected status, words in the reason)
    ([], dict(kind="freeze", pod="ns/ghost"), "unknown-pod", "no pod"),
    ([lifecycle("p", node="node-b")], dict(kind="freeze", pod="ns/p"), "refused", "runs on node-b"),
    ([lifecycle("p", uid="../../outside")], dict(kind="thaw", pod="ns/p"), "refused", "not a UUID"),
    ([lifecycle("p", uid=f"{UID}/..")], dict(kind="set-cpuset", pod="ns/p", target_numa=0), "refused", "not a UUID"),
    ([lifecycle("p"), lifecycle("q")], dict(kind="freeze", pod="ns/q"), "refused", "also claimed"),
    ([lifecycle("p", system_critical=True)], dict(kind="freeze", pod="ns/p"), "refused", "system-critical"),
    ([lifecycle("p")], dict(kind="set-cpuset", pod="ns/p", cpuset=[0, 1]), "refused",
     "the node agent chooses the CPUs"),
    ([lifecycle("p")], dict(kind="set-cpuset", pod="ns/p", target_numa=4096), "refused", "NUMA node 4096 is not on"),
    ([lifecycle("p", uid=OTHER)], dict(kind="freeze", pod="ns/p"), "unknown-pod", "no cgroup for pod"),
    ([lifecycle("..", namespace="../..")], dict(kind="freeze", pod="../../.."), "done", "frozen"),
    ([lifecycle("p")], dict(kind="freeze", pod="ns/p"), "done", "frozen"),
    ([lifecycle("p")], dict(kind="set-cpuset", pod="ns/p", target_numa=1, mems=[7]), "done", "NUMA 1"),
]


@pytest.mark.parametrize("pods, fields, status, words", ACTIONS)
async def test_actions_act_only_on_owned_pods_inside_the_root(agent, pods, fields, status, words):
    service, root, decoy = agent
    for pod in pods:
        service.pods.apply(pod)
    before_root, before_decoy = snapshot(root), snapshot(decoy)
    action = NodeAction.model_construct(**{"action_id": "a1", "node": NODE, "reason": "test", "dry_run": False,
                                           "cpuset": [], "mems": [], "target_numa": None, "cpu_count": 0,
                                           **fields})
    got, why = await service._execute(action)
    assert (got, words in why) == (status, True), why
    assert snapshot(decoy) == before_decoy
    if status != "done":
        assert snapshot(root) == before_root  # refused: nothing written at all


# ------------------------------------------------------- symlinks ---------

def test_a_symlink_posing_as_another_pods_directory_is_ignored(tmp_path):
    fs = v1_pod(tmp_path)
    base = tmp_path / "freezer/kubepods"
    os.symlink(base / "besteffort" / f"pod{UID}", base / f"pod{OTHER}")  # OTHER -> UID's cgroup
    assert OTHER not in list_pod_dirs(base, tmp_path)
    assert freeze_pod(fs, OTHER).status == "unknown-pod"
    assert (base / "besteffort" / f"pod{UID}" / "freezer.state").read_text() == "THAWED\n"


def test_a_cgroup_root_reached_through_a_symlink_still_works(tmp_path):
    v1_pod(tmp_path / "real")
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert freeze_pod(CgroupFs(root=tmp_path / "link"), UID).status == "done"


# ----------------------------------------------------- generated names ----

HOSTILE_PIECES = st.sampled_from(["..", ".", "/", "\x00", "\n", "%2e%2e", "~", "*", "pod", UID, OTHER, "-", "_",
                                  "kubepods", "besteffort", "...", "//", "\\", " "])
HOSTILE_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(HOSTILE_PIECES, max_size=12).map("".join),
    st.builds(lambda a, b: a + UID + b, st.text(max_size=20), st.text(max_size=20)),
    st.text(min_size=5000, max_size=20000, alphabet="./a"),
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """One v1 tree (pod UID with a container) inside `cg`, a decoy outside."""
    base = tmp_path_factory.mktemp("hostile")
    v1_pod(base / "cg", containers=("ctr",))
    outside_target(base)
    write(base / "cg" / "cpuset" / "victim" / "cpuset.cpus", "0-7\n")
    return base


@pytest.fixture
def recorded(monkeypatch):
    """Every path the cgroup code reads or writes."""
    paths: list[Path] = []
    real_read, real_write = cgroups._read, cgroups._write

    def read(path):
        paths.append(Path(path))
        return real_read(path)

    def write_(path, text):
        paths.append(Path(path))
        return real_write(path, text)

    monkeypatch.setattr(cgroups, "_read", read)
    monkeypatch.setattr(cgroups, "_write", write_)
    return paths


def _every_operation(fs: CgroupFs, uid) -> list[str]:
    return [freeze_pod(fs, uid, timeout_s=0.05).status, thaw_pod(fs, uid, timeout_s=0.05).status,
            set_pod_cpuset(fs, uid, [1], [0]).status, str(pod_cpuset(fs, uid)), str(pod_frozen(fs, uid))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(uid=HOSTILE_TEXT)
def test_no_generated_uid_reaches_outside_the_root(tree, recorded, uid):
    root = tree / "cg"
    recorded.clear()
    statuses = _every_operation(CgroupFs(root=root, parent="kubepods"), uid)
    assert all(inside(p, root) for p in recorded), recorded
    if uid != UID:  # malformed or absent: refused or unknown before any file is opened
        assert not recorded and set(statuses[:3]) <= {"refused", "unknown-pod"}
    assert (tree / "outside" / f"pod{UID}" / "freezer.state").read_text() == "THAWED\n"
    assert (root / "cpuset" / "victim" / "cpuset.cpus").read_text() == "0-7\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parent=HOSTILE_TEXT)
def test_no_generated_parent_reaches_outside_the_root(tree, recorded, parent):
    root = tree / "cg"
    recorded.clear()
    _every_operation(CgroupFs(root=root, parent=parent), UID)
    assert all(inside(p, root) for p in recorded), recorded
    assert (tree / "outside" / f"pod{UID}" / "freezer.state").read_text() == "THAWED\n"


@settings(max_examples=150, deadline=None)
@given(namespace=HOSTILE_TEXT, name=HOSTILE_TEXT, uid=HOSTILE_TEXT, key=HOSTILE_TEXT)
def test_no_generated_pod_event_yields_an_unsafe_owned_pod(namespace, name, uid, key):
    table = NodePods(NODE)
    table.apply(lifecycle(name, namespace=namespace, uid=uid))
    for asked in (key, f"{namespace}/{name}"):
        pod, status, why = table.owned(asked)
        if pod is not None:
            assert pod.uid == uid and uuid_like(uid)
        else:
            assert status in ("unknown-pod", "refused") and len(why) < 400


def uuid_like(uid: str) -> bool:
    try:
        return str(uuid.UUID(uid)) == uid or (len(uid) == 32 and int(uid, 16) >= 0 and uid == uid.lower())
    except ValueError:
        return False
