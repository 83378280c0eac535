"""Unknown fields in files people write.

Events on the wire tolerate unknown fields, so that an older consumer keeps
working when a producer adds one. A file an operator typed is different: a
misspelt `qouta:` silently ignored is a tenant without a quota. The CLI
checks such files with `unknown_field` against the very models the events
use, so the wire stays tolerant and one model stays the only definition.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any

from pydantic import BaseModel


def unknown_field(model: type[BaseModel], data: Any, where: str = "") -> str | None:
    """The dotted path of the first key in `data` (a parsed document meant
    for `model`) that no model along the way defines, or None. Values of the
    wrong shape are left to validation, which names them."""
    if not isinstance(data, dict):
        return None
    fields = _fields(model)
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            return path
        found = _unknown_in(fields[key], value, path)
        if found:
            return found
    return None


# A file may hold tens of thousands of items of one type: what a model's
# fields ask for is worked out once per model, not per item.
@functools.cache
def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """Every key a model accepts (names and aliases) -> the plan for its value."""
    plans = {}
    for name, field in model.model_fields.items():
        plans[name] = _plan(field.annotation)
        if field.alias:
            plans[field.alias] = plans[name]
    return plans


def _plan(annotation: Any) -> tuple[str, Any]:
    """(what to walk, its item): ("model", M), ("list", plan), ("dict", plan) or ("leaf", None)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _plan(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation)
    if origin in (typing.Union, types.UnionType):
        models = [arg for arg in typing.get_args(annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)]
        return ("model", models[0]) if len(models) == 1 else ("leaf", None)
    if origin in (list, tuple, set, frozenset):
        (item,) = typing.get_args(annotation)[:1] or (Any,)
        return ("list", _plan(item))
    if origin is dict:
        return ("dict", _plan(typing.get_args(annotation)[1]))
    return ("leaf", None)


def _unknown_in(plan: tuple[str, Any], value: Any, path: str) -> str | None:
    kind, inner = plan
    if kind == "model":
        return unknown_field(inner, value, path)
    if kind == "list" and isinstance(value, list) and inner[0] != "leaf":
        for index, entry in enumerate(value):
            found = _unknown_in(inner, entry, f"{path}.{index}")
            if found:
                return found
    if kind == "dict" and isinstance(value, dict) and inner[0] != "leaf":
        for key, entry in value.items():
            found = _unknown_in(inner, entry, f"{path}.{key}")
            if found:
                return found
    return None
