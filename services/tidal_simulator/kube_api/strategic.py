"""Strategic merge patches and status conditions as the API server applies
them (pure).

A JSON merge patch (RFC 7386, `protocol.merge_patch`) replaces a list
whole. A strategic merge patch merges the lists Kubernetes declares with a
`patchMergeKey` element by element — a pod's `status.conditions` by
`type`, so kube-scheduler can patch `PodScheduled` without clobbering the
kubelet's `Ready` — and replaces every other list. The directives client-go
writes are honoured: `$patch: delete` (drop the element with that key),
`$patch: replace` (the list or object as given), and `$setElementOrder/…`
and `$retainKeys`, which only order or prune, are dropped.

`set_condition` is `podutil.UpdatePodCondition`: the binding subresource
uses it to mark a pod `PodScheduled=True`.
"""

from __future__ import annotations

import copy
from typing import Any

from .protocol import merge_patch

STRATEGIC = "application/strategic-merge-patch+json"

# (resource, path to the list) -> patchMergeKey, from k8s.io/api core/v1 types.go
MERGE_KEYS: dict[tuple[str, tuple[str, ...]], str] = {
    ("pods", ("status", "conditions")): "type",
    ("pods", ("status", "containerStatuses")): "name",
    ("pods", ("status", "initContainerStatuses")): "name",
    ("pods", ("spec", "containers")): "name",
    ("pods", ("spec", "initContainers")): "name",
    ("pods", ("spec", "volumes")): "name",
    ("pods", ("metadata", "ownerReferences")): "uid",
    ("nodes", ("status", "conditions")): "type",
    ("nodes", ("status", "addresses")): "type",
}


def apply_patch(content_type: str, resource: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """`patch` applied to `target` by its content type (merge or strategic)."""
    if content_type == STRATEGIC:
        return strategic_merge_patch(target, patch, resource)
    return merge_patch(target, patch)


def strategic_merge_patch(target: Any, patch: Any, resource: str, path: tuple[str, ...] = ()) -> Any:
    """`patch` merged into `target`: objects key by key (null removes), the
    lists of MERGE_KEYS element by element, anything else replaced."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):  # $setElementOrder/…, $retainKeys: ordering and pruning hints
            continue
        where = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and (resource, where) in MERGE_KEYS:
            result[key] = _merge_list(result.get(key), value, MERGE_KEYS[resource, where], resource, where)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, resource, where)
    return result


def _merge_list(target: Any, patch: list[Any], merge_key: str, resource: str, path: tuple[str, ...]) -> list[Any]:
    items = [copy.deepcopy(item) for item in target] if isinstance(target, list) else []
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    for element in patch:
        if not isinstance(element, dict) or merge_key not in element:
            items.append(copy.deepcopy(element))
            continue
        at = next((i for i, item in enumerate(items)
                   if isinstance(item, dict) and item.get(merge_key) == element[merge_key]), None)
        if element.get("$patch") == "delete":
            if at is not None:
                del items[at]
        elif at is None:
            items.append(strategic_merge_patch({}, element, resource, path))
        else:
            items[at] = strategic_merge_patch(items[at], element, resource, path)
    return items


def set_condition(status: dict[str, Any], condition: dict[str, Any], now: str) -> bool:
    """Put `condition` in `status.conditions` in place of the one of its
    type; `lastTransitionTime` moves to `now` only when the status changes.
    Whether anything changed."""
    conditions = status.setdefault("conditions", [])
    old = next((c for c in conditions if c.get("type") == condition["type"]), None)
    new = dict(condition)
    if old is not None and old.get("status") == new.get("status"):
        new.setdefault("lastTransitionTime", old.get("lastTransitionTime"))
    else:
        new.setdefault("lastTransitionTime", now)
    new = {k: v for k, v in new.items() if v is not None}
    if old is None:
        conditions.append(new)
        return True
    if old == new:
        return False
    conditions[conditions.index(old)] = new
    return True
