"""§A exclusive-CPU state: pure assign/release, atomic checksummed file."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from tidal_topology.checkpoint import (
    CpuState,
    assign,
    decode_state,
    encode_state,
    load_state,
    new_state,
    release,
    save_state,
)


def state_with(*holdings: tuple[str, str, set[int]], cpus=range(8), reserved=(0,)) -> CpuState:
    state = new_state(cpus, reserved)
    for pod, container, held in holdings:
        change = assign(state, pod, container, held)
        assert change.ok, change.reason
        state = change.state
    return state


def test_fresh_state_shares_every_cpu_and_frees_every_non_reserved_one():
    # 8 cpus, cpu 0 reserved: free for exclusive use = 1-7; shared pool = 0-7 (reserved CPUs stay shared,
    # as in kubelet); nothing is pre-partitioned
    assert new_state(range(8), {0}).free == frozenset(range(1, 8))
    assert new_state(range(8), {0}).shared_pool == frozenset(range(8))


def test_assign_takes_cpus_out_of_the_shared_pool():
    change = assign(new_state(range(8), {0}), "ns/a", "main", {2, 3})
    assert change.ok and change.reason == "assigned"
    # free = 1-7 − {2,3} = {1,4,5,6,7}; shared = 0-7 − {2,3}
    assert change.state.free == {1, 4, 5, 6, 7} and change.state.shared_pool == {0, 1, 4, 5, 6, 7}
    assert change.state.assignments == {("ns/a", "main"): {2, 3}}


REFUSED = [
    # (holdings before, request, reason fragment)
    ([], ("ns/b", "c", {0, 1}), "cpus 0 are reserved"),
    ([], ("ns/b", "c", {9}), "cpus 9 are not on this node"),
    ([], ("ns/b", "c", set()), "at least one cpu"),
    ([("ns/a", "main", {2, 3})], ("ns/b", "c", {3, 4}), "cpu 3 is held by ns/a/main"),
    ([("ns/a", "main", {2, 3})], ("ns/a", "main", {4, 5}), "already holds 2-3; release first"),
]


@pytest.mark.parametrize("before, ask, reason", REFUSED)
def test_assign_refuses(before, ask, reason):
    state = state_with(*before)
    change = assign(state, *ask)
    assert not change.ok and reason in change.reason
    assert change.state is state  # unchanged


def test_assign_is_idempotent():
    state = state_with(("ns/a", "main", {2, 3}))
    change = assign(state, "ns/a", "main", {3, 2})
    assert change.ok and change.reason == "already assigned" and change.state is state


def test_release_one_container_or_the_whole_pod():
    state = state_with(("ns/a", "main", {2, 3}), ("ns/a", "side", {4}), ("ns/b", "main", {5}))
    one = release(state, "ns/a", "side")
    assert one.ok and one.cpus == {4}
    assert one.state.free == {1, 4, 6, 7}
    whole = release(state, "ns/a")
    # ns/a gives back 2,3,4: free = {1,6,7} + {2,3,4}
    assert whole.cpus == {2, 3, 4} and whole.state.free == {1, 2, 3, 4, 6, 7}
    assert list(whole.state.assignments) == [("ns/b", "main")]
    assert state.free == {1, 6, 7}  # the original is untouched


def test_release_of_nothing_succeeds():
    state = state_with()
    change = release(state, "ns/ghost")
    assert change.ok and change.cpus == frozenset() and change.state is state


def test_new_state_rejects_reserved_outside_cpus():
    with pytest.raises(ValueError, match=r"reserved cpus \[9\]"):
        new_state(range(4), {9})


# ---------------------------------------------------------------- file ------

def test_save_and_load_round_trip(tmp_path):
    state = state_with(("ns/a", "main", {2, 3}), ("ns/b", "c", {5, 6, 7}))
    path = tmp_path / "cpu_state.json"
    save_state(state, path)
    loaded = load_state(path)
    assert loaded.status == "ok" and loaded.state == state
    assert [p.name for p in tmp_path.iterdir()] == ["cpu_state.json"]  # no temp file left behind
    doc = json.loads(path.read_text())
    assert doc["data"]["assignments"] == {"ns/a": {"main": "2-3"}, "ns/b": {"c": "5-7"}}
    assert doc["checksum"].startswith("sha256:")


def test_save_replaces_the_previous_file(tmp_path):
    path = tmp_path / "s.json"
    save_state(state_with(("ns/a", "main", {2})), path)
    save_state(state_with(), path)
    assert load_state(path).state.assignments == {}


def test_missing_file_is_missing_not_corrupt(tmp_path):
    loaded = load_state(tmp_path / "none.json")
    assert loaded.status == "missing" and loaded.state is None


def tamper(doc: dict) -> dict:
    doc["data"]["assignments"]["ns/a"]["main"] = "2-4"  # data changed, checksum kept
    return doc


def forge(doc: dict, data_change) -> dict:
    """Change the data and re-sign it the documented way (SHA-256 of the data
    as canonical JSON), so only the semantic checks can catch it."""
    data_change(doc["data"])
    canonical = json.dumps(doc["data"], sort_keys=True, separators=(",", ":")).encode()
    doc["checksum"] = "sha256:" + hashlib.sha256(canonical).hexdigest()
    return doc


CORRUPT = [
    ("truncated", lambda raw: raw[: len(raw) // 2], "not JSON"),
    ("empty", lambda raw: b"", "not JSON"),
    ("checksum mismatch", lambda raw: json.dumps(tamper(json.loads(raw))).encode(), "checksum mismatch"),
    ("no data", lambda raw: b'{"version": 1}', "not a state document"),
    ("future version", lambda raw: json.dumps({**json.loads(raw), "version": 3}).encode(), "unsupported version 3"),
    ("double-booked cpu", lambda raw: json.dumps(forge(json.loads(raw), lambda d: d["assignments"].update(
        {"ns/z": {"x": "3"}}))).encode(), "cpu 3 is held by ns/a/main"),
    ("bad cpuset", lambda raw: json.dumps(forge(json.loads(raw), lambda d: d.update(cpus="0-"))).encode(),
     "malformed data"),
    ("assignment on reserved", lambda raw: json.dumps(forge(json.loads(raw), lambda d: d["assignments"].update(
        {"ns/z": {"x": "0"}}))).encode(), "reserved"),
]


@pytest.mark.parametrize("what, damage, reason", CORRUPT, ids=[c[0] for c in CORRUPT])
def test_corrupt_files_are_reported_never_empty(tmp_path, what, damage, reason):
    path = tmp_path / "s.json"
    save_state(state_with(("ns/a", "main", {2, 3})), path)
    path.write_bytes(damage(path.read_bytes()))
    loaded = load_state(path)
    assert loaded.status == "corrupt" and loaded.state is None
    assert reason in loaded.reason


def test_unreadable_path_is_corrupt_with_reason(tmp_path):
    (tmp_path / "dir.json").mkdir()
    loaded = load_state(tmp_path / "dir.json")
    assert loaded.status == "corrupt" and "cannot read" in loaded.reason


def test_a_crash_before_rename_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "s.json"
    old = state_with(("ns/a", "main", {2}))
    save_state(old, path)

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="No space left"):
        save_state(state_with(("ns/b", "main", {5})), path)
    assert load_state(path).state == old
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]  # temp file cleaned up


def test_decode_state_is_the_pure_half():
    state = state_with(("ns/a", "main", {1}))
    assert decode_state(encode_state(state)).state == state
