"""Server-side apply on the stand-in API server (`kube_api/server_side_apply.py`,
`kube_api/field_owners.py`): what `kubectl apply --server-side` gets back,
created or merged, owned field by field, refused as kube-apiserver refuses."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import aiohttp
import pytest
import yaml

from kube_apply import ApplyError, apply_objects
from tidal_simulator.kube_api import KubeApiServer
from tidal_simulator.kube_api.field_owners import ApplyConflict, apply, fields_v1, leaves, paths_of

ROOT = Path(__file__).resolve().parents[1]
NOW = "2026-03-01T10:00:00Z"


def config_map(data: dict | None = None, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "tidal-system", **({"labels": labels} if labels else {})},
            "data": data if data is not None else {"a": "1"}}


NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tidal-system"}}


# -- field ownership (pure) -------------------------------------------------------

@pytest.mark.parametrize("config, expected", [
    ({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n", "uid": "u"}}, set()),  # the server's fields
    ({"metadata": {"name": "n", "labels": {"a": "b"}}}, {("metadata", "labels", "a")}),
    ({"spec": {"replicas": 2, "ports": [{"port": 1}]}}, {("spec", "replicas"), ("spec", "ports")}),  # lists whole
    ({"spec": {"emptyDir": {}}}, {("spec", "emptyDir")}),  # an empty map is a value
])
def test_the_fields_an_applied_configuration_sets(config, expected):
    assert leaves(config) == expected


def test_fields_v1_round_trips():
    paths = {("spec", "replicas"), ("spec", "template", "metadata", "labels", "app"), ("data", "a")}
    assert fields_v1({("spec", "replicas")}) == {"f:spec": {"f:replicas": {}}}
    assert paths_of(fields_v1(paths)) == paths


def test_a_first_apply_makes_the_object_and_records_its_manager():
    made = apply(None, config_map(), "kubectl", force=False, now=NOW)
    assert made["data"] == {"a": "1"} and made["kind"] == "ConfigMap"
    (entry,) = made["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["time"]) == ("kubectl", "Apply", NOW)
    assert paths_of(entry["fieldsV1"]) == {("data", "a")}


def test_a_field_the_manager_no_longer_names_is_removed_and_others_are_kept():
    live = apply(None, config_map({"a": "1", "old": "x"}), "kubectl", force=False, now=NOW)
    live["status"] = {"written": "by the server"}  # nobody applied it: kept
    again = apply(live, config_map({"a": "2"}), "kubectl", force=False, now=NOW)
    assert again["data"] == {"a": "2"} and again["status"] == {"written": "by the server"}


def test_another_managers_field_with_another_value_conflicts_unless_forced():
    live = apply(None, config_map({"a": "1"}), "kubectl", force=False, now=NOW)
    same = apply(live, config_map({"a": "1", "b": "2"}), "helm", force=False, now=NOW)  # same value: shared
    assert same["data"] == {"a": "1", "b": "2"}
    with pytest.raises(ApplyConflict) as refused:
        apply(live, config_map({"a": "9"}), "helm", force=False, now=NOW)
    assert refused.value.conflicts == [(("data", "a"), "kubectl")]
    assert 'conflict with "kubectl": .data.a' in str(refused.value)
    forced = apply(live, config_map({"a": "9"}), "helm", force=True, now=NOW)
    assert forced["data"] == {"a": "9"}
    assert [e["manager"] for e in forced["metadata"]["managedFields"]] == ["helm"]  # kubectl owned only data.a


def test_a_field_two_managers_own_stays_when_one_drops_it():
    live = apply(None, config_map({"a": "1"}), "kubectl", force=False, now=NOW)
    live = apply(live, config_map({"a": "1"}), "helm", force=False, now=NOW)
    without = {k: v for k, v in config_map().items() if k != "data"}
    dropped = apply(live, without, "kubectl", force=False, now=NOW)
    assert dropped["data"] == {"a": "1"}


# -- over HTTP ----------------------------------------------------------------------

@pytest.fixture
async def api():
    async with KubeApiServer() as server:
        yield server


async def raw_apply(api: KubeApiServer, path: str, body, **params) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.patch(api.url + path, params=params, data=json.dumps(body),
                                 headers={"Content-Type": "application/apply-patch+yaml"}) as response:
            return response.status, await response.json()


CM_PATH = "/api/v1/namespaces/tidal-system/configmaps/c"


async def test_apply_creates_then_merges_and_an_unchanged_apply_writes_nothing(api):
    assert await apply_objects(api.url, [NAMESPACE, config_map()]) == [201, 201]
    stored = copy.deepcopy(api.objects["configmaps"][("tidal-system", "c")])
    assert stored["metadata"]["uid"] and stored["metadata"]["resourceVersion"]
    assert await apply_objects(api.url, [config_map()]) == [200]
    assert api.objects["configmaps"][("tidal-system", "c")] == stored  # no new resourceVersion
    await apply_objects(api.url, [config_map({"a": "2"})])
    assert api.objects["configmaps"][("tidal-system", "c")]["data"] == {"a": "2"}
    async with aiohttp.ClientSession() as session:
        async with session.get(api.url + CM_PATH) as response:
            assert (await response.json())["data"] == {"a": "2"}
        async with session.get(api.url + "/api/v1/namespaces/tidal-system/configmaps") as response:
            assert [o["metadata"]["name"] for o in (await response.json())["items"]] == ["c"]


async def test_a_conflict_is_409_naming_the_field_and_force_takes_it(api):
    await apply_objects(api.url, [NAMESPACE, config_map()])
    code, answer = await raw_apply(api, CM_PATH, config_map({"a": "9"}), fieldManager="helm")
    assert code == 409 and answer["reason"] == "Conflict"
    assert answer["details"]["causes"] == [{"reason": "FieldManagerConflict", "field": ".data.a",
                                            "message": 'conflict with "kubectl"'}]
    code, _ = await raw_apply(api, CM_PATH, config_map({"a": "9"}), fieldManager="helm", force="true")
    assert code == 200 and api.objects["configmaps"][("tidal-system", "c")]["data"] == {"a": "9"}


@pytest.mark.parametrize("path, body, params, code, says", [
    (CM_PATH, config_map(), {}, 422, "fieldManager: Required value"),
    ("/api/v1/namespaces/tidal-system/configmaps/other", config_map(), {"fieldManager": "k"}, 400,
     "does not match the name on the URL"),
    ("/api/v1/namespaces/elsewhere/configmaps/c", config_map(), {"fieldManager": "k"}, 400, "namespace"),
    ("/api/v1/namespaces/nowhere/configmaps/c", {**config_map(), "metadata": {"name": "c"}}, {"fieldManager": "k"},
     404, 'namespaces "nowhere" not found'),
    ("/apis/apps/v1/namespaces/tidal-system/deployments/c", config_map(), {"fieldManager": "k"}, 400,
     "API version"),
    ("/apis/example.com/v1/namespaces/tidal-system/widgets/c", {**config_map(), "apiVersion": "example.com/v1"},
     {"fieldManager": "k"}, 404, "could not find the requested resource"),
    ("/api/v1/configmaps/c", config_map(), {"fieldManager": "k"}, 404, "could not find the requested resource"),
])
async def test_an_apply_is_refused_as_kube_apiserver_refuses_it(api, path, body, params, code, says):
    await apply_objects(api.url, [NAMESPACE])
    answered, answer = await raw_apply(api, path, body, **params)
    assert (answered, answer["kind"]) == (code, "Status") and says in answer["message"], answer


async def test_a_crd_applied_serves_its_resources_which_are_applied_through_its_schema(api):
    tenants = yaml.safe_load((ROOT / "k8s/base/crds/tenants.yaml").read_text())
    assert await apply_objects(api.url, [tenants]) == [201]
    assert await apply_objects(api.url, [tenants]) == [200]
    tenant = {"apiVersion": "tidal.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": "team-a"},
              "spec": {"quota": {"A100": 4000}}}
    assert await apply_objects(api.url, [tenant]) == [201]
    assert api.custom.get("tenants.tidal.dev", "team-a")["spec"] == {"quota": {"A100": 4000}}
    with pytest.raises(ApplyError, match="422"):
        await apply_objects(api.url, [{**tenant, "spec": {"quota": {"cpu": -1}}}])


async def test_a_pod_applied_is_pending_for_its_scheduler(api):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"schedulerName": "tidal", "containers": [{"name": "app", "image": "busybox"}]}}
    assert await apply_objects(api.url, [{**pod, "status": {"phase": "Running"}}]) == [201]
    stored = api.pod("default", "p")  # status is the kubelet's: an apply of the pod does not set it
    assert stored["status"]["phase"] == "Pending" and stored["spec"]["schedulerName"] == "tidal"
    api.update_pod("default", "p", lambda p: p["status"].update(phase="Running"))
    labelled = {**pod, "metadata": {"name": "p", "labels": {"app": "x"}}}
    assert await apply_objects(api.url, [labelled]) == [200]
    stored = api.pod("default", "p")
    assert stored["status"]["phase"] == "Running" and stored["metadata"]["labels"] == {"app": "x"}


async def test_discovery_and_openapi_lead_kubectl_to_every_kind_it_applies(api):
    async with aiohttp.ClientSession() as session:
        async def get(path: str) -> dict:
            async with session.get(api.url + path) as response:
                assert response.status == 200, path
                return await response.json()
        groups = {g["name"] for g in (await get("/apis"))["groups"]}
        assert {"apps", "policy", "autoscaling", "networking.k8s.io", "rbac.authorization.k8s.io"} <= groups
        assert {r["name"] for r in (await get("/apis/apps/v1"))["resources"]} == {
            "deployments", "daemonsets", "statefulsets"}
        assert {"pods", "nodes", "namespaces", "configmaps", "services"} <= {
            r["name"] for r in (await get("/api/v1"))["resources"]}
        assert {"api/v1", "apis/apps/v1", "apis/apiextensions.k8s.io/v1"} <= set((await get("/openapi/v3"))["paths"])
        # kubectl leaves validation to the server where the PATCH takes fieldValidation (else it wants /openapi/v2)
        patch = (await get("/openapi/v3/apis/apps/v1"))["paths"][
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
        assert patch["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
        assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
        async with session.get(api.url + "/apis/example.com/v1") as response:
            assert response.status == 404


def deployment(env: list[dict]) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "tidal-system"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}}, "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "app", "image": "tidal:0.1.0", "env": env}]}}}}


async def test_an_upgrade_drops_what_the_new_file_no_longer_sets_and_keeps_what_others_set(api):
    old = deployment([{"name": "A", "value": "1"}, {"name": "OLD", "value": "x"}])
    old["metadata"]["annotations"] = {"gone": "in the new file"}
    await apply_objects(api.url, [NAMESPACE, old])
    code, _ = await raw_apply(api, "/apis/apps/v1/namespaces/tidal-system/deployments/d",
                              {**deployment([]), "spec": {"replicas": 5}}, fieldManager="autoscaler", force="true")
    assert code == 200  # an autoscaler took the replicas over
    new = deployment([{"name": "A", "value": "2"}])
    del new["spec"]["replicas"]
    await apply_objects(api.url, [new])
    stored = api.objects["deployments.apps"][("tidal-system", "d")]
    assert stored["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "2"}]
    assert "annotations" not in stored["metadata"]
    assert stored["spec"]["replicas"] == 5
    assert stored["metadata"]["generation"] == 3  # created, scaled, upgraded


async def test_a_yaml_body_is_read_as_yaml_and_a_broken_one_is_400(api):
    async with aiohttp.ClientSession() as session:
        for body, code in ((yaml.safe_dump(NAMESPACE), 201), ("kind: [", 400), ("- a list", 400)):
            async with session.patch(api.url + "/api/v1/namespaces/tidal-system", params={"fieldManager": "k"},
                                     data=body, headers={"Content-Type": "application/apply-patch+yaml"}) as response:
                assert response.status == code, body
        async with session.get(api.url + "/api/v1/namespaces") as response:
            assert [n["metadata"]["name"] for n in (await response.json())["items"]] == ["tidal-system"]


async def test_a_crd_or_webhook_configuration_the_server_refuses_is_422(api):
    broken_crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                  "metadata": {"name": "widgets.example.com"},
                  "spec": {"group": "example.com", "scope": "Cluster", "names": {"plural": "widgets", "kind": "Widget"},
                           "versions": []}}
    code, answer = await raw_apply(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com",
                                   broken_crd, fieldManager="k")
    assert code == 422 and "exactly one version must be served and stored" in answer["message"]
    hook = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "w"}, "webhooks": [{"name": "short", "sideEffects": "None",
                                                     "admissionReviewVersions": ["v1"],
                                                     "clientConfig": {"url": "https://h/x"}}]}
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/w"
    code, answer = await raw_apply(api, path, hook, fieldManager="k")
    assert code == 422 and "three segments" in answer["message"]
    hook["webhooks"][0]["name"] = "nodes.tidal.dev.example"
    code, answer = await raw_apply(api, path, hook, fieldManager="k")
    assert code == 201 and answer["webhooks"][0]["failurePolicy"] == "Fail"  # defaulted as on create


async def test_a_node_applied_is_stored_with_the_nodes(api):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}}
    assert await apply_objects(api.url, [node]) == [201]
    assert api.node("n1")["metadata"]["labels"] == {"zone": "a"}
