"""Unknown fields in files people write.

Events on the wire tolerate unknown fields, so that an older consumer keeps
working when a producer adds one. A file an operator typed is different: a
misspelt `qouta:` silently ignored is a tenant without a quota. The CLI
checks such files with `unknown_field` against the very models the events
use, so the wire stays tolerant and one model stays the only definition.
"""

from __future__ import annotations

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
    fields = model.model_fields
    known = {name for name in fields} | {f.alias for f in fields.values() if f.alias}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in known:
            return path
        field = fields.get(key) or next(f for f in fields.values() if f.alias == key)
        found = _unknown_in(field.annotation, value, path)
        if found:
            return found
    return None


def _unknown_in(annotation: Any, value: Any, path: str) -> str | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unknown_in(typing.get_args(annotation)[0], value, path)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return unknown_field(annotation, value, path)
    if origin in (typing.Union, types.UnionType):
        models = [arg for arg in typing.get_args(annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)]
        return unknown_field(models[0], value, path) if len(models) == 1 else None
    if origin in (list, tuple, set, frozenset) and isinstance(value, list):
        (item,) = typing.get_args(annotation)[:1] or (Any,)
        for index, entry in enumerate(value):
            found = _unknown_in(item, entry, f"{path}.{index}")
            if found:
                return found
    if origin is dict and isinstance(value, dict):
        item = typing.get_args(annotation)[1]
        for key, entry in value.items():
            found = _unknown_in(item, entry, f"{path}.{key}")
            if found:
                return found
    return None
