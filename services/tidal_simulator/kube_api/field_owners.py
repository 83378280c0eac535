"""Server-side apply's merge and field ownership (pure), as far as the
simulated API server plays it.

An applied configuration names the fields its manager wants: every leaf of
it (a scalar, or a list: lists are atomic here, where the real server
merges the lists Kubernetes declares with a merge key element by element)
becomes that manager's, recorded in `metadata.managedFields` as FieldsV1
(`{"f:spec": {"f:replicas": {}}}`). Applying again:

- a field another manager owns, asked with another value, is a conflict:
  the apply is refused (409) unless it is forced, which takes the field over;
- a field the manager owned and no longer names is removed, unless another
  manager owns it too (how an upgrade drops a setting);
- every other field of the live object is kept.

Fields the server owns (`metadata.uid`, `resourceVersion`, …) are never a
manager's.
"""

from __future__ import annotations

import copy
from typing import Any

Path = tuple[str, ...]
SERVER_FIELDS = {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "name",
                 "namespace", "deletionTimestamp", "selfLink"}


class ApplyConflict(Exception):
    """The apply would change fields other managers own: (path, manager) each."""

    def __init__(self, conflicts: list[tuple[Path, str]]) -> None:
        self.conflicts = conflicts
        shown = "\n".join(f'* conflict with "{manager}": .{".".join(path)}' for path, manager in conflicts)
        super().__init__(f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}:"
                         f"\n{shown}")


def leaves(obj: Any, prefix: Path = ()) -> set[Path]:
    """The field paths an applied configuration sets (maps followed, lists and
    scalars whole; `apiVersion`, `kind` and the server's metadata left out)."""
    if not isinstance(obj, dict) or (obj == {} and prefix):
        return {prefix}
    found: set[Path] = set()
    for key, value in obj.items():
        if (not prefix and key in ("apiVersion", "kind")) or (prefix == ("metadata",) and key in SERVER_FIELDS):
            continue
        found |= leaves(value, (*prefix, key))
    return found


def fields_v1(paths: set[Path]) -> dict[str, Any]:
    """The paths as FieldsV1: one nested `f:<name>` map per path."""
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def paths_of(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    """FieldsV1 back to the paths it owns (a field whose map is empty)."""
    found: set[Path] = set()
    for key, sub in tree.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        found |= paths_of(sub, path) if sub else {path}
    return found


def value_at(obj: Any, path: Path) -> tuple[bool, Any]:
    """(present, value) of one field path."""
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return False, None
        obj = obj[part]
    return True, obj


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    for part in path[:-1]:
        if not isinstance(obj.get(part), dict):
            obj[part] = {}
        obj = obj[part]
    obj[path[-1]] = copy.deepcopy(value)


def _remove(obj: dict[str, Any], path: Path) -> None:
    """Drop one field, and the maps it leaves empty."""
    parents = []
    for part in path[:-1]:
        if not isinstance(obj.get(part), dict):
            return
        parents.append((obj, part))
        obj = obj[part]
    obj.pop(path[-1], None)
    for parent, part in reversed(parents):
        if parent[part]:
            break
        del parent[part]


def owners(live: dict[str, Any]) -> dict[str, set[Path]]:
    """manager -> the paths it owns on `live`."""
    return {entry["manager"]: paths_of(entry.get("fieldsV1") or {})
            for entry in (live.get("metadata") or {}).get("managedFields") or [] if entry.get("manager")}


def apply(live: dict[str, Any] | None, config: dict[str, Any], manager: str, *, force: bool,
          now: str) -> dict[str, Any]:
    """The object `config` applied by `manager` leaves (`live` None: the new
    object); ApplyConflict when it changes another manager's field unforced."""
    wanted = leaves(config)
    result = copy.deepcopy(live) if live is not None else {"metadata": {}}
    owned = owners(result)
    mine = owned.pop(manager, set())
    conflicts = sorted((path, other) for other, paths in owned.items() for path in wanted & paths
                       if value_at(result, path) != value_at(config, path))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for path, other in conflicts:  # forced: the field is this manager's now
        owned[other].discard(path)
    for path in mine - wanted:
        if not any(path in paths for paths in owned.values()):
            _remove(result, path)
    for path in wanted:
        _set(result, path, value_at(config, path)[1])
    result["apiVersion"], result["kind"] = config.get("apiVersion"), config.get("kind")
    entries = []
    for entry in result["metadata"].get("managedFields") or []:
        who = entry.get("manager")
        if who == manager or (who in owned and entry.get("fieldsV1") and not owned[who]):
            continue  # this manager's entry is written below; another's, all taken over, goes
        if who in owned and entry.get("fieldsV1"):
            entry["fieldsV1"] = fields_v1(owned[who])
        entries.append(entry)
    before = next((e for e in (live or {}).get("metadata", {}).get("managedFields") or []
                   if e.get("manager") == manager), {})
    entries.append({"manager": manager, "operation": "Apply", "apiVersion": config.get("apiVersion"),
                    "time": before.get("time", now), "fieldsType": "FieldsV1", "fieldsV1": fields_v1(wanted)})
    result["metadata"]["managedFields"] = entries
    if result != live:  # a change: stamped now (an apply that changes nothing writes nothing)
        entries[-1]["time"] = now
    return result
