"""Former spellings of renamed fields in documents people write.

A `Tenant`'s spec went camelCase in v1alpha1 (`auto_grouping` became
`autoGrouping`): its models name each field in snake_case with a camelCase
alias, and reading takes either. For one release the old spelling is read
with a warning; both spellings of one field in one mapping are refused,
since which one was meant cannot be told.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class OldSpelling:
    """A key written `old` (a dotted path) where `new` is the name now;
    `both`: the same mapping gives the new spelling too."""

    old: str
    new: str
    both: bool

    def warning(self) -> str:
        return f"{self.old} is deprecated, write {self.new} (the old spelling is refused from the next release)"


def old_spellings(model: type[BaseModel], data: Any, where: str = "", renamed: str | None = None) -> list[OldSpelling]:
    """Every key of `data` (a parsed document meant for `model`, at path
    `where`; `renamed`: that path in the new spelling) that is a field's
    name where its alias differs, in the models' field order, nested
    models included. Keys no model knows are left to `strict.unknown_field`."""
    if not isinstance(data, dict):
        return []
    renamed = where if renamed is None else renamed
    found = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        for key in (name, alias) if alias != name else (name,):
            if key not in data:
                continue
            path, new = (f"{where}.{key}", f"{renamed}.{alias}") if where else (key, alias)
            if key != alias:
                found.append(OldSpelling(path, new, alias in data))
            found += _nested(field.annotation, data[key], path, new)
    return found


def _nested(annotation: Any, value: Any, path: str, new: str) -> list[OldSpelling]:
    """Old spellings inside one field's value: a model, or a list of models."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _nested(typing.get_args(annotation)[0], value, path, new)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return old_spellings(annotation, value, path, new)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is list and isinstance(value, list) and args:
        return [found for index, item in enumerate(value)
                for found in _nested(args[0], item, f"{path}.{index}", f"{new}.{index}")]
    if len(args) == 1 and origin is not list:  # X | None
        return _nested(args[0], value, path, new)
    return []
