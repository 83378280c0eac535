"""JSON Patch (RFC 6902) with JSON Pointers (RFC 6901), as the API server
applies an admission webhook's patch (pure).

    add      a member (or replaces it), or an array element at an index or `-`
    remove   an existing member or element
    replace  an existing member or element
    test     the value equals, else the whole patch fails
    move, copy

Each operation applies to the result of the one before; any failure fails
the whole patch (`JsonPatchError`) and the document is left as it was: the
patch works on a copy.
"""

from __future__ import annotations

import copy
from typing import Any


class JsonPatchError(ValueError):
    """The patch is malformed or does not apply to the document."""


def pointer(text: Any) -> list[str]:
    """The reference tokens of a JSON Pointer (`/a/b~1c` → ['a', 'b/c'])."""
    if not isinstance(text, str) or (text and not text.startswith("/")):
        raise JsonPatchError(f"{text!r} is not a JSON pointer")
    return [t.replace("~1", "/").replace("~0", "~") for t in text.split("/")[1:]]


def _index(container: list[Any], token: str, *, adding: bool) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise JsonPatchError(f"{token!r} is not an array index")
    index = int(token)
    if index > len(container) or (index == len(container) and not adding):
        raise JsonPatchError(f"index {index} is out of range (array of {len(container)})")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, adding=False)]
        else:
            raise JsonPatchError(f"path /{'/'.join(tokens)}: /{token} does not exist")
    return node


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"path /{'/'.join(tokens)} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, adding=False)]
    raise JsonPatchError(f"path /{'/'.join(tokens)}: the parent is not an object or array")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], adding=True), value)
    else:
        raise JsonPatchError(f"path /{'/'.join(tokens)}: the parent is not an object or array")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    _get(doc, tokens)  # must exist
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        del parent[tokens[-1]]
    else:
        del parent[_index(parent, tokens[-1], adding=False)]
    return doc


def _replace(doc: Any, tokens: list[str], value: Any) -> Any:
    _get(doc, tokens)  # must exist
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    parent[tokens[-1] if isinstance(parent, dict) else _index(parent, tokens[-1], adding=False)] = value
    return doc


def apply_json_patch(document: Any, patch: Any) -> Any:
    """`patch` (a list of operations) applied to a copy of `document`."""
    if not isinstance(patch, list):
        raise JsonPatchError("a JSON patch is an array of operations")
    doc = copy.deepcopy(document)
    for number, op in enumerate(patch):
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise JsonPatchError(f"operation {number} is not an object with an 'op'")
        kind, path = op["op"], pointer(op.get("path"))
        if kind in ("add", "replace", "test") and "value" not in op:
            raise JsonPatchError(f"operation {number} ({kind}) has no value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            doc = _replace(doc, path, copy.deepcopy(op["value"]))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise JsonPatchError(f"test failed at {op['path']}")
        elif kind in ("move", "copy"):
            source = pointer(op.get("from"))
            if kind == "move" and path[:len(source)] == source and path != source:
                raise JsonPatchError(f"cannot move {op.get('from')} into itself")
            value = copy.deepcopy(_get(doc, source))
            if kind == "move":
                doc = _remove(doc, source)
            doc = _add(doc, path, value)
        else:
            raise JsonPatchError(f"operation {number}: unknown op {kind!r}")
    return doc
