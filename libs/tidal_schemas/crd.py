"""The CustomResourceDefinitions of `Tenant` and `FairShare`, generated
from the pydantic models (`tenancy.py`, `pod.TenantConfig`) so that the
API server refuses what the models refuse wherever a schema can say it.

A pydantic JSON schema becomes a structural OpenAPI v3 schema, as
apiextensions.k8s.io/v1 requires: every `$ref` inlined, `anyOf [X, null]`
turned into X with `nullable: true`, `const` into a one-value `enum`, a
`type` on every node, `title` and `default` dropped (the models fill
defaults; the API server would store them), and no
`x-kubernetes-preserve-unknown-fields`. The spec is camelCase (the models'
aliases), its former snake_case spellings kept for one release; the
models' cross-field rules (group names unique, groups or autoGrouping but
not both) are CEL rules the API server checks at admission (`crd_rules`);
the bridge still reports as a condition whatever gets past them.

`write(dir)` regenerates the manifests (`tidal schemas crds`);
`drift(dir)` lists the files that differ, for the test that keeps the
committed ones equal to the generated ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .common import MAX_INT
from .crd_rules import MAX_GROUPS, add_rules, deprecated_spellings, list_map
from .pod import TenantConfig
from .tenancy import GROUP, NOT_IN_SPEC, VERSION, FairShareSpec, FairShareStatus, TenantStatus

KEPT = ("type", "description", "required", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern",
        "minItems", "maxItems", "format", "nullable")
CRD_DIR = Path("k8s/base/crds")


class NotStructural(ValueError):
    """A model uses a construct a structural schema cannot express."""


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The structural OpenAPI v3 form of one pydantic JSON schema node."""
    if "$ref" in node:
        resolved = defs[node["$ref"].rsplit("/", 1)[-1]]
        return structural({**resolved, **{k: v for k, v in node.items() if k != "$ref"}}, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise NotStructural(f"a union of {len(options)} types cannot be structural: {node['anyOf']}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return {**structural({**options[0], **rest}, defs), "nullable": True}
    out = {key: node[key] for key in KEPT if key in node}
    if "description" in out:  # docstrings: one paragraph
        out["description"] = " ".join(out["description"].split())
    if "const" in node:
        out["enum"] = [node["const"]]
    if out.get("maximum") == MAX_INT:  # int64 is the integer's range anyway (format int64)
        del out["maximum"]
    if node.get("type") == "integer":
        out["format"] = "int64"
    if "properties" in node:
        out["properties"] = {name: structural(sub, defs) for name, sub in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = structural(node["additionalProperties"], defs)
    elif node.get("additionalProperties") is True or node.get("type") == "object" and "properties" not in node:
        raise NotStructural(f"an object with unnamed fields of any type cannot be structural: {node}")
    if "items" in node:
        out["items"] = structural(node["items"], defs)
    if "type" not in out:
        raise NotStructural(f"no type: {node}")
    return out


def model_schema(model: Any, *, by_alias: bool = False, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A model's structural schema, without the fields in `drop`."""
    schema = model.model_json_schema(by_alias=by_alias)
    defs = schema.pop("$defs", {})
    for name in drop:
        schema["properties"].pop(name, None)
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r not in drop]
        if not schema["required"]:
            del schema["required"]
    return structural(schema, defs)


def _object_schema(description: str, spec: dict[str, Any], status: dict[str, Any], *,
                   spec_required: bool) -> dict[str, Any]:
    schema = {"type": "object", "description": description, "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": spec, "status": status}}
    if spec_required:
        schema["required"] = ["spec"]
    return schema


def _crd(kind: str, plural: str, short: str, schema: dict[str, Any], columns: list[dict[str, Any]]) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "tidal"}},
        "spec": {
            "group": GROUP, "scope": "Cluster",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List",
                      "shortNames": [short], "categories": ["tidal"]},
            "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                          "additionalPrinterColumns": columns + [
                              {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                          "schema": {"openAPIV3Schema": schema}}]}}


def tenant_crd() -> dict[str, Any]:
    """The `Tenant` CRD: spec is a tenant.config without its name, in camelCase."""
    spec = model_schema(TenantConfig, by_alias=True, drop=NOT_IN_SPEC)
    spec["properties"]["groups"]["maxItems"] = MAX_GROUPS
    deprecated_spellings(spec)
    spec["description"] = ("GPU groups, quotas and permissions: the fields `tidal tenants apply` takes, the "
                           "tenant named by metadata.name")
    status = model_schema(TenantStatus, by_alias=True)
    list_map(status["properties"]["conditions"], "type")
    schema = _object_schema("A tenant of the Tidal scheduler: a new spec replaces its configuration; deleting "
                            "the object deletes the tenant.", spec, status, spec_required=False)
    add_rules(schema)
    ready = '.status.conditions[?(@.type=="Ready")]'
    return _crd("Tenant", "tenants", "tn", schema, [
        {"name": "GPUs", "type": "string", "jsonPath": ".status.gpus",
         "description": "GPUs held per model against quota (whole GPUs)"},
        {"name": "Free Groups", "type": "integer", "jsonPath": ".status.freeGroupCount",
         "description": "GPU groups with a whole GPU free"},
        {"name": "Ready", "type": "string", "jsonPath": f"{ready}.status"},
        {"name": "Reason", "type": "string", "jsonPath": f"{ready}.reason", "priority": 1},
    ])


def fair_share_crd() -> dict[str, Any]:
    """The `FairShare` CRD: one per user, its status written by the bridge."""
    schema = _object_schema("A user's fair-share record (written by Tidal: lower scores are served first).",
                            model_schema(FairShareSpec, by_alias=True), model_schema(FairShareStatus, by_alias=True),
                            spec_required=True)
    return _crd("FairShare", "fairshares", "fs", schema, [
        {"name": "User", "type": "string", "jsonPath": ".spec.user"},
        {"name": "CPU", "type": "number", "jsonPath": ".status.scores.cpu"},
        {"name": "GPU", "type": "number", "jsonPath": ".status.scores.gpu"},
        {"name": "Last Update", "type": "date", "jsonPath": ".status.lastUpdate"},
    ])


def documents() -> dict[str, dict[str, Any]]:
    """File name -> CRD, for every custom resource Tidal defines."""
    return {"tenants.yaml": tenant_crd(), "fairshares.yaml": fair_share_crd()}


def render(doc: dict[str, Any]) -> str:
    return ("# Generated from the pydantic models by `tidal schemas crds`: do not edit.\n"
            + yaml.safe_dump(doc, sort_keys=False, width=120))


def write(directory: Path) -> list[str]:
    """Write every CRD into `directory`; the file names."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, doc in documents().items():
        (directory / name).write_text(render(doc))
    return list(documents())


def drift(directory: Path) -> list[str]:
    """The CRD files in `directory` that are missing or differ from the models."""
    problems = []
    for name, doc in documents().items():
        path = directory / name
        if not path.exists():
            problems.append(f"{name}: missing")
        elif path.read_text() != render(doc):
            problems.append(f"{name}: differs")
    return problems
