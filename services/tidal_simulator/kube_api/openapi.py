"""The API server's checks of custom resources against their CRD's
`openAPIV3Schema` (pure): the validation that answers 422 Invalid, the
pruning of unknown fields (400 under `fieldValidation=Strict`, as kubectl
asks), and the structural-schema rules a CRD must follow to be accepted.

Supported keywords are the ones the generated CRDs use and the checks the
real server makes for them: type, nullable, required, enum, minimum,
maximum, minLength, maxLength, pattern, minItems, properties,
additionalProperties, items, format date-time. Messages follow
apiextensions-apiserver's field errors (`spec.quota.cpu: Invalid value: -1:
spec.quota.cpu in body should be greater than or equal to 0`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


@dataclass(frozen=True)
class Cause:
    """One field error, as a Status's `details.causes` entry."""

    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, FieldValueTypeInvalid
    field: str
    message: str

    def text(self) -> str:
        return f"{self.field}: {self.message}"


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _typed(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES.get(kind, object))


def validate(value: Any, schema: dict[str, Any], path: str) -> list[Cause]:
    """Every field error of `value` against `schema` (at `path`, e.g. "spec")."""
    if value is None:
        return [] if schema.get("nullable") else [
            Cause("FieldValueTypeInvalid", path, f'Invalid value: "null": {path} in body must be of type '
                  f'{schema.get("type", "object")}: "null"')]
    kind = schema.get("type")
    if kind and not _typed(value, kind):
        found = "integer" if isinstance(value, int) and not isinstance(value, bool) else type(value).__name__
        found = {"str": "string", "dict": "object", "list": "array", "bool": "boolean", "float": "number"}.get(found,
                                                                                                               found)
        return [Cause("FieldValueTypeInvalid", path,
                      f'Invalid value: "{found}": {path} in body must be of type {kind}: "{found}"')]
    causes = _scalar(value, schema, path)
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                causes.append(Cause("FieldValueRequired", f"{path}.{name}", "Required value"))
        properties, extra = schema.get("properties", {}), schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                causes += validate(item, sub, f"{path}.{key}")
    elif isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append(Cause("FieldValueInvalid", path, f"Invalid value: {len(value)}: {path} in body should "
                                f"have at least {schema['minItems']} items"))
        if "items" in schema:
            for index, item in enumerate(value):
                causes += validate(item, schema["items"], f"{path}[{index}]")
    return causes


def _scalar(value: Any, schema: dict[str, Any], path: str) -> list[Cause]:
    causes = []
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(_shown(v) for v in schema["enum"])
        causes.append(Cause("FieldValueNotSupported", path,
                            f"Unsupported value: {_shown(value)}: supported values: {supported}"))
    bad = f"Invalid value: {_shown(value)}: {path} in body should"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append(Cause("FieldValueInvalid", path, f"{bad} be greater than or equal to {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            causes.append(Cause("FieldValueInvalid", path, f"{bad} be less than or equal to {schema['maximum']}"))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append(Cause("FieldValueInvalid", path, f"{bad} be at least {schema['minLength']} chars long"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append(Cause("FieldValueInvalid", path, f"{bad} be at most {schema['maxLength']} chars long"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append(Cause("FieldValueInvalid", path, f"{bad} match '{schema['pattern']}'"))
    return causes


def prune(value: Any, schema: dict[str, Any], path: str, unknown: list[str]) -> Any:
    """`value` without the fields `schema` does not specify (their paths
    added to `unknown`), as the API server stores a custom resource."""
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return value
        properties, extra = schema.get("properties"), schema.get("additionalProperties")
        if properties is None and isinstance(extra, dict):
            return {k: prune(v, extra, f"{path}.{k}", unknown) for k, v in value.items()}
        kept = {}
        for key, item in value.items():
            if key in (properties or {}):
                kept[key] = prune(item, properties[key], f"{path}.{key}", unknown)
            else:
                unknown.append(f"{path}.{key}")
        return kept
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"], f"{path}[{i}]", unknown) for i, item in enumerate(value)]
    return value


FORBIDDEN = ("$ref", "anyOf", "oneOf", "allOf", "not", "definitions", "$defs", "const", "title", "discriminator")


def structural_problems(schema: dict[str, Any], path: str = "openAPIV3Schema") -> list[str]:
    """Why `schema` is not a structural schema the API server accepts (as
    far as these CRDs go: no references or combinators, a `type` on every
    node, `properties` and `additionalProperties` never together)."""
    problems = [f"{path}.{key}: Forbidden" for key in FORBIDDEN if key in schema]
    if "type" not in schema and not schema.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}.type: Required value: must not be empty for specified object fields")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{path}.additionalProperties: Forbidden: additionalProperties and properties are "
                        "mutual exclusive")
    for name, sub in (schema.get("properties") or {}).items():
        problems += structural_problems(sub, f"{path}.properties[{name}]")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            problems += structural_problems(schema[key], f"{path}.{key}")
    return problems
