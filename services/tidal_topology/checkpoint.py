"""§A exclusive-CPU state of a node — the agent's books: which container
holds which CPUs, and which pod each holding (or NUMA pinning) serves.
Nothing is pre-partitioned: at start every CPU is shared.

    free (for exclusive use) = all CPUs − reserved − ∪ assigned
    shared pool              = all CPUs − ∪ assigned      (reserved CPUs stay shared, as in kubelet)

Assign/release are pure; `claims` (see `Claim`) are kept beside them and
changed by `books.py`. The state file is written atomically (temp file,
fsync, rename, fsync of the directory) and carries a SHA-256 checksum; a
file that fails to parse or to match its checksum is reported as corrupt so
the caller rebuilds from the stream — it is never read as "empty".
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from .cpuset import format_cpuset, parse_cpuset

VERSION = 2
READS = (1, 2)  # version 1 had no claims: each assigned pod reads as a bound claim
Key = tuple[str, str]  # (pod "namespace/name", container)
Stage = Literal["decided", "bound", "running"]


@dataclass(frozen=True)
class Claim:
    """Why the agent pins a pod: the decision (or move) it serves, the pod's
    uid once known, the NUMA nodes it is pinned to, and how far its bind has
    gone (`decided`: awaiting the bind since `at`, epoch seconds)."""

    uid: str = ""
    decision_id: str = ""
    numa_nodes: tuple[int, ...] = ()
    stage: Stage = "decided"
    at: float = 0.0


@dataclass(frozen=True)
class CpuState:
    cpus: frozenset[int]
    reserved: frozenset[int] = frozenset()
    assignments: Mapping[Key, frozenset[int]] = field(default_factory=dict)
    claims: Mapping[str, Claim] = field(default_factory=dict)

    @property
    def assigned(self) -> frozenset[int]:
        """Every CPU held exclusively."""
        return frozenset().union(*self.assignments.values()) if self.assignments else frozenset()

    @property
    def free(self) -> frozenset[int]:
        """All CPUs − reserved − every assigned CPU: what exclusive requests take from."""
        return self.cpus - self.reserved - self.assigned

    @property
    def shared_pool(self) -> frozenset[int]:
        """All CPUs − every assigned CPU: where every other pod runs."""
        return self.cpus - self.assigned

    def held_by(self, pod: str) -> frozenset[int]:
        """The CPUs every container of `pod` holds (empty: none)."""
        return frozenset().union(*(cpus for (p, _), cpus in self.assignments.items() if p == pod))

    def holder_of(self, cpu: int) -> Key | None:
        """The (pod, container) holding `cpu`, or None."""
        return next((key for key, held in self.assignments.items() if cpu in held), None)


@dataclass(frozen=True)
class Change:
    """The state after an assign/release (unchanged when `ok` is False), the
    CPUs it concerned, and why."""

    state: CpuState
    ok: bool
    cpus: frozenset[int]
    reason: str


def new_state(cpus: Iterable[int], reserved: Iterable[int] = ()) -> CpuState:
    """A fresh state: no assignment, the shared pool = cpus − reserved."""
    all_cpus, reserved_set = frozenset(cpus), frozenset(reserved)
    if not reserved_set <= all_cpus:
        raise ValueError(f"reserved cpus {sorted(reserved_set - all_cpus)} are not among the cpus")
    return CpuState(all_cpus, reserved_set, {})


def assign(state: CpuState, pod: str, container: str, cpus: Iterable[int]) -> Change:
    """Give `cpus` to (pod, container) out of the shared pool. Assigning the
    same CPUs again is a no-op success; anything that would double-book a
    CPU, touch a reserved one or replace a different holding is refused."""
    wanted = frozenset(cpus)
    key = (pod, container)
    if not wanted:
        return Change(state, False, wanted, "an exclusive assignment needs at least one cpu")
    held = state.assignments.get(key)
    if held is not None:
        if held == wanted:
            return Change(state, True, wanted, "already assigned")
        return Change(state, False, wanted, f"{pod}/{container} already holds {format_cpuset(held)}; release first")
    problems = []
    if wanted - state.cpus:
        problems.append(f"cpus {format_cpuset(wanted - state.cpus)} are not on this node")
    if wanted & state.reserved:
        problems.append(f"cpus {format_cpuset(wanted & state.reserved)} are reserved")
    for cpu in sorted(wanted & state.assigned):
        holder = state.holder_of(cpu)
        problems.append(f"cpu {cpu} is held by {holder[0]}/{holder[1]}")
    if problems:
        return Change(state, False, wanted, "; ".join(problems))
    assignments = dict(state.assignments)
    assignments[key] = wanted
    return Change(replace(state, assignments=assignments), True, wanted, "assigned")


def release(state: CpuState, pod: str, container: str | None = None) -> Change:
    """Return to the shared pool the CPUs of one container, or of every
    container of `pod` when `container` is None. Releasing nothing succeeds."""
    keys = [k for k in state.assignments if k[0] == pod and (container is None or k[1] == container)]
    if not keys:
        return Change(state, True, frozenset(), "nothing assigned")
    freed = frozenset().union(*(state.assignments[k] for k in keys))
    assignments = {k: v for k, v in state.assignments.items() if k not in keys}
    return Change(replace(state, assignments=assignments), True, freed, f"released {format_cpuset(freed)}")


# ---------------------------------------------------------------- file ------


def encode_state(state: CpuState) -> bytes:
    """The state file's bytes: the data and its SHA-256 checksum."""
    data = _data(state)
    return json.dumps({"version": VERSION, "checksum": _checksum(data), "data": data}, indent=1).encode()


def _data(state: CpuState) -> dict:
    pods: dict[str, dict[str, str]] = {}
    for (pod, container), cpus in sorted(state.assignments.items()):
        pods.setdefault(pod, {})[container] = format_cpuset(cpus)
    claims = {pod: {"uid": c.uid, "decision_id": c.decision_id, "numa_nodes": format_cpuset(c.numa_nodes),
                    "stage": c.stage, "at": c.at} for pod, c in sorted(state.claims.items())}
    return {"cpus": format_cpuset(state.cpus), "reserved": format_cpuset(state.reserved), "assignments": pods,
            "claims": claims}


def _claim(raw: dict) -> Claim:
    if raw["stage"] not in ("decided", "bound", "running") or not isinstance(raw["at"], (int, float)):
        raise ValueError(f"bad claim {raw!r:.80}")
    return Claim(str(raw["uid"]), str(raw["decision_id"]), tuple(parse_cpuset(raw["numa_nodes"])), raw["stage"],
                 float(raw["at"]))


def _checksum(data: dict) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def save_state(state: CpuState, path: str | Path) -> None:
    """Write the state so that a crash leaves either the old or the new file,
    never a torn one. OSError propagates (the caller's disk is the problem)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(encode_state(state))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)


@dataclass(frozen=True)
class Loaded:
    """`ok` with a state, `missing` (no file: start fresh), or `corrupt`
    (rebuild from the stream) with the reason."""

    status: Literal["ok", "missing", "corrupt"]
    state: CpuState | None = None
    reason: str = ""


def load_state(path: str | Path) -> Loaded:
    """Read a state file written by `save_state`, verifying its checksum and
    that no CPU is double-booked or reserved and assigned at once."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Loaded("missing", reason=f"no state file at {path}")
    except OSError as exc:
        return Loaded("corrupt", reason=f"cannot read {path}: {exc.strerror or exc}")
    return decode_state(raw, str(path))


def decode_state(raw: bytes, where: str = "state") -> Loaded:
    """The pure half of `load_state`."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        return Loaded("corrupt", reason=f"{where}: not JSON ({exc})")
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        return Loaded("corrupt", reason=f"{where}: not a state document")
    if doc.get("version") not in READS:
        return Loaded("corrupt", reason=f"{where}: unsupported version {doc.get('version')!r}")
    data = doc["data"]
    if doc.get("checksum") != _checksum(data):
        return Loaded("corrupt", reason=f"{where}: checksum mismatch")
    try:
        state = new_state(parse_cpuset(data["cpus"]), parse_cpuset(data["reserved"]))
        for pod, containers in data["assignments"].items():
            for container, text in containers.items():
                change = assign(state, pod, container, parse_cpuset(text))
                if not change.ok:
                    return Loaded("corrupt", reason=f"{where}: {pod}/{container}: {change.reason}")
                state = change.state
        if doc["version"] == 1:
            claims = {pod: Claim(stage="bound") for pod, _ in state.assignments}
        else:
            claims = {str(pod): _claim(raw) for pod, raw in data["claims"].items()}
        state = replace(state, claims=claims)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return Loaded("corrupt", reason=f"{where}: malformed data ({exc})")
    return Loaded("ok", state)
