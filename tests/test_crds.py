"""The Tenant and FairShare CRDs: the committed manifests are the generated
ones, structural, and what the simulated API server (custom.py, openapi.py)
does with them: registration, 422 from the schema, pruning and strict
field validation, the status subresource, generations, watch, the printer
columns kubectl shows, and `kubectl apply` / `delete` with the real kubectl."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest
import yaml

from tidal_schemas import crd
from tidal_schemas.tenancy import TenantDocumentError, fair_share_name, gpu_summary, tenant_config
from tidal_simulator.kube_api import KubeApiServer, write_kubeconfig
from tidal_simulator.kube_api.openapi import structural_problems, validate
from conftest import patience

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "k8s" / "base" / "crds"
TENANTS = "/apis/tidal.dev/v1alpha1/tenants"
MERGE = {"Content-Type": "application/merge-patch+json"}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def committed() -> list[dict]:
    return [yaml.safe_load(path.read_text()) for path in sorted(CRDS.glob("*.yaml"))]


async def call(http: aiohttp.ClientSession, method: str, url: str, **kwargs):
    async with http.request(method, url, **kwargs) as response:
        return response.status, await response.json(), response.headers


async def registered(api: KubeApiServer, http: aiohttp.ClientSession) -> None:
    for doc in committed():
        code, body, _ = await call(http, "POST", f"{api.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                   json=doc)
        assert code == 201, body


def tenant(name: str, spec: dict) -> dict:
    return {"apiVersion": "tidal.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": name}, "spec": spec}


# -- the manifests -----------------------------------------------------------------------

def test_committed_crds_are_the_generated_ones(tmp_path):
    assert crd.drift(CRDS) == []
    assert {d["metadata"]["name"] for d in committed()} == {"tenants.tidal.dev", "fairshares.tidal.dev"}
    copy = tmp_path / "crds"
    shutil.copytree(CRDS, copy)
    text = (copy / "tenants.yaml").read_text()
    (copy / "tenants.yaml").write_text(text.replace("minLength: 1", "minLength: 2", 1))
    (copy / "fairshares.yaml").unlink()
    assert crd.drift(copy) == ["tenants.yaml: differs", "fairshares.yaml: missing"]


def test_the_schemas_are_structural_and_a_non_structural_one_is_caught():
    for doc in committed():
        (version,) = doc["spec"]["versions"]
        assert structural_problems(version["schema"]["openAPIV3Schema"]) == []
        assert "status" in version["subresources"]
        assert "x-kubernetes-preserve-unknown-fields" not in json.dumps(doc)
    assert structural_problems({"type": "object", "properties": {"a": {"$ref": "#/x"}}}) == [
        "openAPIV3Schema.properties[a].$ref: Forbidden",
        "openAPIV3Schema.properties[a].type: Required value: must not be empty for specified object fields"]
    with pytest.raises(crd.NotStructural):
        crd.structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})


def test_the_tenant_spec_schema_refuses_what_the_model_refuses_field_by_field():
    spec = crd.tenant_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    bad = {"quota": {"cpu": -1, "A100": "lots"}, "groups": [{"name": "", "bindings": []}],
           "permissions": {"nodes": "n1"}}
    fields = sorted(c.field for c in validate(bad, spec, "spec"))
    assert fields == ["spec.groups[0].bindings", "spec.groups[0].name", "spec.permissions.nodes",
                      "spec.quota.A100", "spec.quota.cpu"]
    for field in ("quota", "groups", "permissions"):  # each is refused by the model too
        with pytest.raises(TenantDocumentError):
            tenant_config(tenant("t", {field: bad[field]}))
    assert validate({"quota": {"A100": 4000}, "autoGrouping": {"byModel": True}}, spec, "spec") == []


def test_tenant_documents_plain_or_manifest_read_the_same():
    plain = {"tenant": "vision", "quota": {"A100": 4000}}
    assert tenant_config(plain) == tenant_config(tenant("vision", {"quota": {"A100": 4000}}))
    for document, field in ((tenant("v", {"qouta": {}}), "spec.qouta"), (tenant("v", {"tenant": "x"}), "spec.tenant"),
                            ({**tenant("v", {}), "kind": "Pod"}, "kind"),
                            (tenant("v", {"groups": [{"name": "g", "bindings": [{"node": "n", "gpus": ["a"]}]}] * 2}),
                             "spec.groups")):
        with pytest.raises(TenantDocumentError) as refused:
            tenant_config(document)
        assert refused.value.field == field, refused.value


def test_summaries_and_names():
    # 2500 milli-GPU of A100 held against 4000; T4 held without a limit; a generic GPU limit shown last
    assert gpu_summary({"A100": 2500, "T4": 500, "gpu": 3000, "cpu": 9000}, {"A100": 4000, "gpu": 8000}) == \
        "A100 2.5/4, T4 0.5, gpu 3/8"
    assert gpu_summary({"cpu": 1000}, {}) == "none"
    assert fair_share_name("alice") == "alice"
    odd = fair_share_name("Alice@Corp")
    assert odd.startswith("alice-corp-") and odd != fair_share_name("alice@corp")


# -- the API server ------------------------------------------------------------------------

async def test_custom_resources_are_validated_pruned_and_their_status_kept_apart():
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        await registered(api, http)
        base = api.url + TENANTS
        code, body, _ = await call(http, "POST", base, json=tenant("bad", {"quota": {"cpu": -5}}))
        assert code == 422 and body["reason"] == "Invalid"
        assert body["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "spec.quota.cpu", "message":
                                              "Invalid value: -5: spec.quota.cpu in body should be greater than or "
                                              "equal to 0"}]
        assert 'Tenant.tidal.dev "bad" is invalid: spec.quota.cpu' in body["message"]
        code, body, _ = await call(http, "POST", base + "?fieldValidation=Strict",
                                   json=tenant("typo", {"qouta": {"cpu": 5}}))
        assert code == 400 and 'unknown field "spec.qouta"' in body["message"]
        code, body, headers = await call(http, "POST", base, json={**tenant("t", {"quota": {"cpu": 5}, "x": 1}),
                                                                   "status": {"gpus": "forged"}})
        assert code == 201 and body["spec"] == {"quota": {"cpu": 5}} and "status" not in body  # pruned, status dropped
        assert 'unknown field \\"spec.x\\"' in headers["Warning"]
        assert body["metadata"]["generation"] == 1
        # the main resource ignores status; /status writes nothing else
        code, body, _ = await call(http, "PATCH", f"{base}/t", json={"status": {"gpus": "x"}}, headers=MERGE)
        assert code == 200 and "status" not in body and body["metadata"]["generation"] == 1
        code, body, _ = await call(http, "PATCH", f"{base}/t/status", headers=MERGE,
                                   json={"status": {"gpus": "A100 1/2", "freeGroupCount": 1}, "spec": {"quota": {}}})
        assert code == 200 and body["status"]["gpus"] == "A100 1/2" and body["spec"] == {"quota": {"cpu": 5}}
        code, body, _ = await call(http, "PATCH", f"{base}/t/status", headers=MERGE,
                                   json={"status": {"freeGroupCount": -1}})
        assert code == 422 and body["details"]["causes"][0]["field"] == "status.freeGroupCount"
        code, body, _ = await call(http, "PATCH", f"{base}/t", json={"spec": {"quota": {"cpu": 7}}}, headers=MERGE)
        assert body["metadata"]["generation"] == 2 and body["status"]["gpus"] == "A100 1/2"
        code, table, _ = await call(http, "GET", base, headers={"Accept": TABLE})
        columns = [c["name"] for c in table["columnDefinitions"]]
        assert columns == ["Name", "GPUs", "Free Groups", "Ready", "Reason", "Age"]
        assert table["rows"][0]["cells"][:3] == ["t", "A100 1/2", 1]
        assert (await call(http, "GET", f"{api.url}/apis/tidal.dev/v1alpha1/namespaces/x/tenants"))[0] == 404
        assert (await call(http, "DELETE", f"{base}/t"))[0] == 200
        assert (await call(http, "GET", f"{base}/t"))[0] == 404


async def test_custom_resources_are_watched_and_discovered():
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        await registered(api, http)
        groups = (await call(http, "GET", f"{api.url}/apis"))[1]["groups"]
        assert "tidal.dev" in {g["name"] for g in groups}
        resources = {r["name"] for r in (await call(http, "GET", f"{api.url}/apis/tidal.dev/v1alpha1"))[1]["resources"]}
        assert resources == {"tenants", "tenants/status", "fairshares", "fairshares/status"}
        _, listed, _ = await call(http, "GET", api.url + TENANTS)
        seen = []

        async def watch() -> None:
            async with http.get(api.url + TENANTS, params={"watch": "true", "timeoutSeconds": "5",
                                                           "resourceVersion": listed["metadata"]["resourceVersion"]}) \
                    as response:
                async for line in response.content:
                    event = json.loads(line)
                    seen.append((event["type"], event["object"]["metadata"]["name"]))
                    if event["type"] == "DELETED":
                        return

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.2)
        await call(http, "POST", api.url + TENANTS, json=tenant("a", {}))
        await call(http, "PATCH", api.url + TENANTS + "/a/status", json={"status": {"gpus": "none"}}, headers=MERGE)
        await call(http, "DELETE", api.url + TENANTS + "/a")
        await asyncio.wait_for(watcher, patience(5))
        assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


async def test_a_crd_that_is_not_structural_is_refused():
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        doc = committed()[0]
        doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = {"anyOf": [{"type": "string"}]}
        code, body, _ = await call(http, "POST", f"{api.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                   json=doc)
        assert code == 422 and "properties[spec].anyOf: Forbidden" in body["message"]


KUBECTL = shutil.which("kubectl")


def kubectl(config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"HOME": str(config.parent), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # its discovery cache there
    return subprocess.run([KUBECTL, "--kubeconfig", str(config), *args], capture_output=True, text=True, env=env,
                          timeout=patience(60))


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is missing: Debian's kubernetes-client provides it")
async def test_kubectl_applies_reapplies_refuses_and_deletes_a_tenant(tmp_path):
    example = ROOT / "k8s/examples/tenant.yaml"
    more, negative, typo = (tmp_path / name for name in ("more.yaml", "negative.yaml", "typo.yaml"))
    text = example.read_text()
    more.write_text(text.replace("A100: 4000 ", "A100: 6000 "))
    negative.write_text(text.replace("cpu: 64000 ", "cpu: -1 "))
    typo.write_text(text.replace("  quota:", "  qouta:"))
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        await registered(api, http)
        config = write_kubeconfig(tmp_path / "kubeconfig", api.url)

        async def run(*args: str) -> subprocess.CompletedProcess:
            return await asyncio.to_thread(kubectl, config, *args)
        assert (await run("apply", "-f", str(example))).stdout.strip() == "tenant.tidal.dev/team-a created"
        assert (await run("apply", "-f", str(more))).stdout.strip() == "tenant.tidal.dev/team-a configured"
        refused = await run("apply", "-f", str(negative))
        assert refused.returncode == 1 and "spec.quota.cpu: Invalid value: -1" in refused.stderr
        refused = await run("apply", "-f", str(typo))
        assert refused.returncode == 1 and 'unknown field "spec.qouta"' in refused.stderr
        assert api.custom.get("tenants.tidal.dev", "team-a")["spec"]["quota"]["A100"] == 6000
        assert (await run("delete", "-f", str(example))).returncode == 0
        assert api.custom.get("tenants.tidal.dev", "team-a") is None
