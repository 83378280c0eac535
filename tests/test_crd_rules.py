"""The Tenant CRD by Kubernetes' conventions: camelCase spec (the former
snake_case spellings read for one release), the model's cross-field rules
as CEL `x-kubernetes-validations` evaluated here by a real CEL
implementation (cel-python) as the API server evaluates them (each rule on
its schema node, `self` the value there), and conditions as a list map.
The stand-in API server does not evaluate CEL: what it shows is that the
deprecated spellings are stored, not pruned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import celpy
import orjson
import pytest
import yaml

from tidal_schemas import TenantConfig, crd
from tidal_schemas.crd_rules import MAX_GROUPS, RULES, node_at
from tidal_schemas.export import event_schema
from tidal_schemas.tenancy import TenantDocumentError, deprecated_keys, tenant_config
from tidal_simulator.kube_api import KubeApiServer
from tidal_cli.errors import CliError
from tidal_cli.tenants_cmd import load_tenants

ROOT = Path(__file__).resolve().parents[1]
CEL = celpy.Environment()


def schema() -> dict[str, Any]:
    (version,) = yaml.safe_load((ROOT / "k8s/base/crds/tenants.yaml").read_text())["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def refusals(value: Any, node: dict[str, Any], path: str = "") -> list[tuple[str, str]]:
    """(field, message) of every rule that does not hold, each on its node
    with `self` the value there, below the root as the API server walks it."""
    if value is None:
        return []
    found = []
    for validation in node.get("x-kubernetes-validations", []):
        program = CEL.program(CEL.compile(validation["rule"]))
        result = program.evaluate({"self": celpy.json_to_cel(value)})  # an error (returned or raised) fails too
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            found.append((path, validation["message"]))
    if isinstance(value, dict):
        for key, item in value.items():
            sub = (node.get("properties") or {}).get(key) or node.get("additionalProperties")
            if isinstance(sub, dict):
                found += refusals(item, sub, f"{path}.{key}".lstrip("."))
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        for index, item in enumerate(value):
            found += refusals(item, node["items"], f"{path}[{index}]")
    return found


def tenant(spec: dict) -> dict:
    return {"apiVersion": "tidal.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": "t"}, "spec": spec}


def group(name: str, **more: Any) -> dict:
    return {"name": name, "bindings": [{"node": "n1", "gpus": ["gpu0"]}], **more}


UNIQUE, EITHER = "group names must be unique", "either groups (manual) or autoGrouping"
OF = "is the deprecated spelling of"
# (the rule, by its message; the spec; the field it refuses at, or None when accepted):
# one refused and at least one accepted example per rule of the CRD
CASES = [
    (UNIQUE, {"groups": [group("a"), group("b")]}, None),
    (UNIQUE, {"groups": [group("a"), group("b"), group("a")]}, "spec.groups"),
    (EITHER, {"groups": [group("a")], "quota": {"A100": 1000}}, None),
    (EITHER, {"groups": [], "autoGrouping": {}}, None),  # an empty list is no groups, as in the model
    (EITHER, {"groups": [group("a")], "autoGrouping": {"byModel": True}}, "spec"),
    (EITHER, {"groups": [group("a")], "auto_grouping": {"by_model": True}}, "spec"),
    (f"auto_grouping {OF} autoGrouping", {"autoGrouping": {"byModel": True}}, None),
    (f"auto_grouping {OF} autoGrouping", {"auto_grouping": {"by_model": False}}, None),
    (f"auto_grouping {OF} autoGrouping", {"autoGrouping": {}, "auto_grouping": {}}, "spec"),
    (f"by_model {OF} byModel", {"autoGrouping": {"byModel": True}}, None),
    (f"by_model {OF} byModel", {"autoGrouping": {"byModel": True, "by_model": False}}, "spec.autoGrouping"),
    (f"by_kind {OF} byKind", {"autoGrouping": {"by_kind": True}}, None),
    (f"by_kind {OF} byKind", {"autoGrouping": {"byKind": True, "by_kind": True}}, "spec.autoGrouping"),
    (f"gpus_per_container {OF} gpusPerContainer", {"autoGrouping": {"gpusPerContainer": 2}}, None),
    (f"gpus_per_container {OF} gpusPerContainer", {"auto_grouping": {"gpusPerContainer": 2, "gpus_per_container": 2}},
     "spec.auto_grouping"),
    (f"container_id {OF} containerId", {"groups": [group("a", containerId="c1")]}, None),
    (f"container_id {OF} containerId", {"groups": [group("a", containerId="c1", container_id="c1")]},
     "spec.groups[0]"),
]


@pytest.mark.parametrize(("rule", "spec", "field"), CASES, ids=[json.dumps(c[1])[:70] for c in CASES])
def test_the_crds_rules_refuse_what_the_model_refuses(rule, spec, field):
    found = refusals(tenant(spec), schema())
    if field is None:
        assert found == []
        assert tenant_config(tenant(spec)).tenant == "t"
    else:
        assert len(found) == 1 and found[0][0] == field and rule in found[0][1], found
        with pytest.raises(TenantDocumentError):  # the rule says what the model says
            tenant_config(tenant(spec))


def _nodes(node: dict[str, Any]):
    yield node
    for sub in [*(node.get("properties") or {}).values(), node.get("items"), node.get("additionalProperties")]:
        if isinstance(sub, dict):
            yield from _nodes(sub)


def test_every_rule_of_the_crd_has_a_refused_and_an_accepted_example():
    messages = {v["message"] for node in _nodes(schema()) for v in node.get("x-kubernetes-validations", [])}
    assert len(messages) == 2 + 5  # the model's two rules, one for each of the five renamed fields
    assert {rule.message for rule in RULES} <= messages
    for message in messages:
        examples = {field is None for rule, _, field in CASES if rule in message}
        assert examples == {True, False}, message


def test_the_generated_crd_carries_the_rules_the_list_map_and_the_group_bound():
    root = schema()
    assert root == crd.tenant_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for rule in RULES:
        assert rule.validation() in node_at(root, rule.at)["x-kubernetes-validations"]
    conditions = node_at(root, "status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map" and conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]  # a map key must be required
    assert node_at(root, "spec.groups")["maxItems"] == MAX_GROUPS
    spec = node_at(root, "spec")["properties"]
    assert {"autoGrouping", "auto_grouping"} <= spec.keys()
    assert spec["auto_grouping"]["description"].startswith("Deprecated: the former spelling of autoGrouping")
    assert {"byModel", "byKind", "gpusPerContainer"} <= spec["autoGrouping"]["properties"].keys()
    assert "containerId" in spec["groups"]["items"]["properties"]
    # the status was camelCase already, and has no former spellings
    assert not [key for node in _nodes(node_at(root, "status")) for key in node.get("properties") or {} if "_" in key]


def test_a_tenant_with_more_groups_than_the_crd_bound_is_refused_by_the_reader_too():
    many = [group(f"g{i}") for i in range(MAX_GROUPS + 1)]
    with pytest.raises(TenantDocumentError) as refused:
        tenant_config(tenant({"groups": many}))
    assert refused.value.field == "spec.groups" and str(MAX_GROUPS) in refused.value.message
    assert len(tenant_config(tenant({"groups": many[:MAX_GROUPS]})).groups) == MAX_GROUPS
    assert len(tenant_config({"tenant": "t", "groups": many}).groups) == MAX_GROUPS + 1  # the event has no bound


# -- the spellings --------------------------------------------------------------------------

OLD = {"auto_grouping": {"by_model": False, "by_kind": True, "gpus_per_container": 2}, "quota": {"A100": 2000}}
NEW = {"autoGrouping": {"byModel": False, "byKind": True, "gpusPerContainer": 2}, "quota": {"A100": 2000}}


def test_old_and_new_spellings_read_the_same_and_the_old_ones_are_named():
    assert tenant_config(tenant(OLD)) == tenant_config(tenant(NEW)) == tenant_config({"tenant": "t", **OLD})
    assert tenant_config(tenant(NEW)).auto_grouping.gpus_per_container == 2
    assert deprecated_keys(tenant(NEW)) == []
    assert deprecated_keys({"tenant": "t", **OLD}) == []  # a plain mapping is the event's fields
    warnings = deprecated_keys(tenant(OLD))
    assert warnings == [f"spec.{old} is deprecated, write spec.{new} (the old spelling is refused from the next "
                        "release)" for old, new in (("auto_grouping", "autoGrouping"),
                                                   ("auto_grouping.by_model", "autoGrouping.byModel"),
                                                   ("auto_grouping.by_kind", "autoGrouping.byKind"),
                                                   ("auto_grouping.gpus_per_container",
                                                    "autoGrouping.gpusPerContainer"))]
    assert deprecated_keys(tenant({"groups": [group("a", container_id="c")]})) == [
        "spec.groups.0.container_id is deprecated, write spec.groups.0.containerId (the old spelling is refused "
        "from the next release)"]


@pytest.mark.parametrize(("document", "field"), [
    (tenant({"autoGrouping": {}, "auto_grouping": {}}), "spec.auto_grouping"),
    (tenant({"autoGrouping": {"byKind": True, "by_kind": False}}), "spec.autoGrouping.by_kind"),
    ({"tenant": "t", "auto_grouping": {"gpusPerContainer": 1, "gpus_per_container": 1}},
     "auto_grouping.gpus_per_container"),
])
def test_both_spellings_of_one_field_are_refused_naming_the_old_one(document, field):
    with pytest.raises(TenantDocumentError) as refused:
        tenant_config(document)
    assert refused.value.field == field and "give " in refused.value.message


def test_the_event_on_the_wire_keeps_its_snake_case_names():
    wire = orjson.loads(tenant_config(tenant(NEW)).model_dump_json())
    assert wire["auto_grouping"] == {"by_model": False, "by_kind": True, "gpus_per_container": 2}
    properties = event_schema("tenant.config")["$defs"]
    assert "auto_grouping" in properties["TenantConfig"]["properties"]
    assert "gpus_per_container" in properties["AutoGrouping"]["properties"]
    committed = json.loads((ROOT / "schemas/tenant.config.json").read_text())
    assert committed == json.loads(json.dumps(event_schema("tenant.config")))


def test_tidal_tenants_apply_reads_old_spellings_with_a_warning_and_refuses_both(tmp_path, capsys):
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(tenant(OLD)))
    (config,) = load_tenants(old)
    assert config == tenant_config(tenant(NEW))
    err = capsys.readouterr().err
    assert f"{old}: warning: spec.auto_grouping is deprecated, write spec.autoGrouping" in err
    assert err.count("warning:") == 4
    examples = load_tenants(ROOT / "examples/tenants.yaml")
    assert [t.tenant for t in examples] == ["team-vision", "team-speech"]
    assert examples[1].auto_grouping.gpus_per_container == 1 and capsys.readouterr().err == ""
    both = tmp_path / "both.yaml"  # refused: and no warning for the valid tenant before it (one line)
    both.write_text(yaml.safe_dump_all([tenant(OLD), {**tenant({**OLD, **NEW}), "metadata": {"name": "u"}}]))
    with pytest.raises(CliError, match="tenant 2: field 'spec.auto_grouping': the deprecated spelling of autoGrouping"):
        load_tenants(both)
    assert capsys.readouterr().err == ""
    odd = tmp_path / "odd.yaml"
    odd.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": 5}))
    with pytest.raises(CliError, match="the items of a List must be a list"):
        load_tenants(odd)


def test_the_example_manifests_are_camel_case_and_pass_the_rules():
    for path in (ROOT / "k8s/examples/tenant.yaml", ROOT / "examples/tenants.yaml"):
        document = yaml.safe_load(path.read_text())
        for item in document.get("items", [document]):
            assert refusals(item, schema()) == [] and deprecated_keys(item) == [], path
            assert "_" not in json.dumps(item["spec"]).replace("A100", ""), path  # no snake_case key left


async def test_the_api_server_stores_the_deprecated_spellings_rather_than_pruning_them():
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        for doc in crd.documents().values():
            async with http.post(f"{api.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=doc) as r:
                assert r.status == 201, await r.text()
        base = f"{api.url}/apis/tidal.dev/v1alpha1/tenants"
        for name, spec in (("old", OLD), ("new", NEW)):
            body = {**tenant(spec), "metadata": {"name": name}}
            async with http.post(base + "?fieldValidation=Strict", json=body) as response:
                assert response.status == 201, await response.text()
                assert (await response.json())["spec"] == spec  # nothing pruned
        async with http.get(f"{base}/old") as response:
            stored = await response.json()
        assert tenant_config(stored).auto_grouping.gpus_per_container == 2 and len(deprecated_keys(stored)) == 4
