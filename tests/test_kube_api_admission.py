"""The stand-in API server's mutating admission on nodes/status, against a
small real HTTPS webhook made here (its own CA): denials, timeouts, bad
answers and patches, what the rules match, the configurations' validation,
the status strategy; and the JSON patch applier (RFC 6902)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time

import aiohttp
import pytest
from aiohttp import web

from tidal_cli.webhook_tls import make_webhook_tls
from tidal_simulator.kube_api import ApiError, KubeApiServer
from tidal_simulator.kube_api.admission import Attributes, rule_matches, selector_matches
from tidal_simulator.kube_api.json_patch import JsonPatchError, apply_json_patch
from webhook_parts import webhook_configuration

BASE = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


class HookServer:
    """An HTTPS AdmissionReview endpoint whose answer a test sets (`behave`)."""

    def __init__(self, tmp_path) -> None:
        self.tls = make_webhook_tls(["localhost"], ["127.0.0.1"])
        self.cert, self.key, _ = self.tls.write(tmp_path / "hook")
        self.seen: list[dict] = []
        self.behave = lambda review: {"allowed": True}
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        review = await request.json()
        self.seen.append({"query": dict(request.query), **review})
        answer = self.behave(review)
        if isinstance(answer, web.StreamResponse):
            return answer
        if asyncio.iscoroutine(answer):
            answer = await answer
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": {"uid": review["request"]["uid"], **answer}})

    async def __aenter__(self) -> "HookServer":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        app = web.Application()
        app.router.add_post("/mutate", self._handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        self.url = f"https://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/mutate"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


def patch_of(ops) -> dict:
    return {"allowed": True, "patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


@pytest.fixture
async def cluster(tmp_path):
    async with KubeApiServer() as api, HookServer(tmp_path) as hook:
        api.add_node("n1", cpu="8", memory="32Gi", labels={"pool": "cpu"})
        yield api, hook


async def test_the_review_sent_and_the_patch_applied(cluster):
    api, hook = cluster
    hook.behave = lambda review: patch_of([{"op": "add", "path": "/metadata/labels/seen", "value": "yes"},
                                           {"op": "replace", "path": "/status/allocatable/cpu", "value": "9"}])
    api.add_webhook_configuration(webhook_configuration(hook.url, hook.tls.ca_bundle, timeout=3))
    node = await api.write_node_status("n1", {"allocatable": {"cpu": "7"}}, user="system:node:n1")
    assert node["status"]["allocatable"]["cpu"] == "9" and node["metadata"]["labels"]["seen"] == "yes"
    sent = hook.seen[-1]
    assert sent["query"] == {"timeout": "3s"}
    request = sent["request"]
    assert (request["operation"], request["subResource"], request["resource"], request["name"]) == \
        ("UPDATE", "status", {"group": "", "version": "v1", "resource": "nodes"}, "n1")
    assert request["userInfo"]["username"] == "system:node:n1"
    assert request["object"]["status"]["allocatable"]["cpu"] == "7"  # the update as written
    assert request["oldObject"]["status"]["allocatable"]["cpu"] == "8"  # the node as stored


async def test_a_denial_refuses_with_its_code_and_message(cluster):
    api, hook = cluster
    hook.behave = lambda review: {"allowed": False, "status": {"code": 403, "message": "no oversell here"}}
    api.add_webhook_configuration(webhook_configuration(hook.url, hook.tls.ca_bundle, policy="Ignore"))
    async with aiohttp.ClientSession() as http:
        answer = await http.patch(f"{api.url}/api/v1/nodes/n1/status", json={"status": {"allocatable": {"cpu": "7"}}},
                                  headers={"Content-Type": "application/merge-patch+json"})
        body = await answer.json()
    assert answer.status == 403
    assert body["message"] == 'admission webhook "node-allocatable.tidal.dev" denied the request: no oversell here'
    assert hook.seen[-1]["request"]["userInfo"]["username"] == "system:anonymous"
    assert api.node("n1")["status"]["allocatable"]["cpu"] == "8"
    hook.behave = lambda review: {"allowed": False}  # no code: 400
    with pytest.raises(ApiError) as refused:
        await api.write_node_status("n1", {"allocatable": {"cpu": "7"}}, user="system:node:n1")
    assert refused.value.code == 400 and refused.value.message.endswith("without explanation")


async def test_timeout_seconds_is_honoured(cluster):
    api, hook = cluster

    async def slow(review):
        await asyncio.sleep(5)
        return {"allowed": True}
    hook.behave = slow
    api.add_webhook_configuration(webhook_configuration(hook.url, hook.tls.ca_bundle, policy="Ignore", timeout=1))
    began = time.monotonic()
    node = await api.write_node_status("n1", {"allocatable": {"cpu": "7"}}, user="system:node:n1")
    assert node["status"]["allocatable"]["cpu"] == "7" and time.monotonic() - began < 3
    api.add_webhook_configuration(webhook_configuration(hook.url, hook.tls.ca_bundle, policy="Fail", timeout=1))
    with pytest.raises(ApiError) as refused:
        await api.write_node_status("n1", {"allocatable": {"cpu": "6"}}, user="system:node:n1")
    assert refused.value.code == 500 and "TimeoutError" in refused.value.message


@pytest.mark.parametrize("behave, ignored", [
    (lambda review: web.Response(status=503, text="down"), True),  # not 200: a failed call
    (lambda review: {"allowed": True, "patch": "W10=", "patchType": "MergePatch"}, True),
    (lambda review: web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                       "response": {"uid": "another", "allowed": True}}), True),
    # a patch that does not apply is a 500 whatever the policy, as the API server does
    (lambda review: patch_of([{"op": "replace", "path": "/status/nothing/here", "value": 1}]), False),
])
async def test_bad_answers(cluster, behave, ignored):
    api, hook = cluster
    hook.behave = behave
    api.add_webhook_configuration(webhook_configuration(hook.url, hook.tls.ca_bundle, policy="Ignore"))
    if ignored:
        node = await api.write_node_status("n1", {"allocatable": {"cpu": "7"}}, user="system:node:n1")
        assert node["status"]["allocatable"]["cpu"] == "7"
        api.add_webhook_configuration(webhook_configuration(hook.url, hook.tls.ca_bundle, policy="Fail"))
    with pytest.raises(ApiError) as refused:
        await api.write_node_status("n1", {"allocatable": {"cpu": "6"}}, user="system:node:n1")
    assert refused.value.code == 500


async def test_what_the_rules_match(cluster):
    api, hook = cluster
    hook.behave = lambda review: patch_of([{"op": "replace", "path": "/status/allocatable/cpu", "value": "9"}])
    # `nodes` alone is the main resource only: a status write is not sent
    api.add_webhook_configuration(webhook_configuration(hook.url, hook.tls.ca_bundle, resources=("nodes",)))
    node = await api.write_node_status("n1", {"allocatable": {"cpu": "7"}}, user="system:node:n1")
    assert node["status"]["allocatable"]["cpu"] == "7" and not hook.seen
    doc = webhook_configuration(hook.url, hook.tls.ca_bundle, resources=("*/status",))
    doc["webhooks"][0]["objectSelector"] = {"matchLabels": {"pool": "gpu"}}
    api.add_webhook_configuration(doc)
    await api.write_node_status("n1", {"allocatable": {"cpu": "6"}}, user="system:node:n1")
    assert not hook.seen  # the node's labels do not match
    doc["webhooks"][0]["objectSelector"] = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}
    api.add_webhook_configuration(doc)
    node = await api.write_node_status("n1", {"allocatable": {"cpu": "6"}}, user="system:node:n1")
    assert node["status"]["allocatable"]["cpu"] == "9" and len(hook.seen) == 1


def _attributes(resource="nodes", sub="status", operation="UPDATE") -> Attributes:
    return Attributes(operation=operation, resource=resource, sub_resource=sub, name="n1", obj={}, old=None,
                      username="u")


@pytest.mark.parametrize("resources, operations, sub, matched", [
    (["nodes/status"], ["UPDATE"], "status", True), (["nodes"], ["UPDATE"], "status", False),
    (["nodes/*"], ["*"], "status", True), (["nodes/*"], ["UPDATE"], "", True), (["*"], ["UPDATE"], "status", False),
    (["*/*"], ["UPDATE"], "status", True), (["*/status"], ["UPDATE"], "status", True),
    (["pods/status"], ["UPDATE"], "status", False), (["nodes/status"], ["CREATE"], "status", False),
])
def test_rule_matching(resources, operations, sub, matched):
    rule = {"operations": operations, "apiGroups": [""], "apiVersions": ["v1"], "resources": resources}
    assert rule_matches(rule, _attributes(sub=sub)) == matched


def test_selectors():
    assert selector_matches({}, {}) and selector_matches(None, {"a": "b"})
    assert not selector_matches({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {})
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]}, {})


async def test_configurations_over_rest_are_validated_and_defaulted(cluster):
    api, hook = cluster
    async with aiohttp.ClientSession() as http:
        bad = webhook_configuration(hook.url, hook.tls.ca_bundle, operations=("PATCH",))  # not an admission op
        answer = await http.post(f"{api.url}{BASE}", json=bad)
        assert answer.status == 422 and "operations" in (await answer.json())["message"]
        for change in ({"sideEffects": "Unknown"}, {"timeoutSeconds": 31}, {"name": "short.name"},
                       {"clientConfig": {"url": "http://127.0.0.1/x"}}, {"admissionReviewVersions": ["v1beta1"]}):
            doc = webhook_configuration(hook.url, hook.tls.ca_bundle)
            doc["webhooks"][0].update(change)
            answer = await http.post(f"{api.url}{BASE}", json=doc)
            assert answer.status == 422, change
        doc = webhook_configuration(hook.url, hook.tls.ca_bundle)
        del doc["webhooks"][0]["failurePolicy"], doc["webhooks"][0]["timeoutSeconds"]
        assert (await http.post(f"{api.url}{BASE}", json=doc)).status == 201
        assert (await http.post(f"{api.url}{BASE}", json=doc)).status == 409
        stored = await (await http.get(f"{api.url}{BASE}/tidal-webhook")).json()
        assert (stored["webhooks"][0]["failurePolicy"], stored["webhooks"][0]["timeoutSeconds"]) == ("Fail", 10)
        listed = await (await http.get(f"{api.url}{BASE}")).json()
        assert [i["metadata"]["name"] for i in listed["items"]] == ["tidal-webhook"]
        groups = await (await http.get(f"{api.url}/apis")).json()
        assert "admissionregistration.k8s.io" in [g["name"] for g in groups["groups"]]
        assert (await http.delete(f"{api.url}{BASE}/tidal-webhook")).status == 200
        assert (await http.get(f"{api.url}{BASE}/tidal-webhook")).status == 404


async def test_the_status_strategy_keeps_the_stored_spec_and_the_written_annotations(cluster):
    api, hook = cluster
    hook.behave = lambda review: patch_of([{"op": "add", "path": "/spec/unschedulable", "value": True},
                                           {"op": "add", "path": "/metadata/annotations/a", "value": "b"}])
    api.add_webhook_configuration(webhook_configuration(hook.url, hook.tls.ca_bundle))
    async with aiohttp.ClientSession() as http:
        answer = await http.put(f"{api.url}/api/v1/nodes/n1/status", json={
            **api.node("n1"), "spec": {"podCIDR": "10.0.0.0/24"}})
        node = await answer.json()
        assert answer.status == 200
        assert node["spec"] == {} and node["metadata"]["annotations"] == {"a": "b"}
        stale = {"metadata": {"resourceVersion": "1"}, "status": {"allocatable": {"cpu": "1"}}}
        answer = await http.patch(f"{api.url}/api/v1/nodes/n1/status", json=stale,
                                  headers={"Content-Type": "application/merge-patch+json"})
        assert answer.status == 409
        json_patch = [{"op": "replace", "path": "/status/allocatable/cpu", "value": "5"}]
        answer = await http.patch(f"{api.url}/api/v1/nodes/n1/status", data=json.dumps(json_patch),
                                  headers={"Content-Type": "application/json-patch+json"})
        assert answer.status == 200 and (await answer.json())["status"]["allocatable"]["cpu"] == "5"


@pytest.mark.parametrize("doc, patch, expected", [
    ({"a": 1}, [{"op": "add", "path": "/b", "value": 2}], {"a": 1, "b": 2}),
    ({"a": [1, 3]}, [{"op": "add", "path": "/a/1", "value": 2}], {"a": [1, 2, 3]}),
    ({"a": [1]}, [{"op": "add", "path": "/a/-", "value": 2}], {"a": [1, 2]}),
    ({"a": {"b/c": 1, "d~e": 2}}, [{"op": "remove", "path": "/a/b~1c"}, {"op": "replace", "path": "/a/d~0e",
                                                                         "value": 3}], {"a": {"d~e": 3}}),
    ({"a": 1}, [{"op": "test", "path": "/a", "value": 1}, {"op": "move", "from": "/a", "path": "/b"}], {"b": 1}),
    ({"a": {"x": 1}}, [{"op": "copy", "from": "/a", "path": "/b"}], {"a": {"x": 1}, "b": {"x": 1}}),
])
def test_json_patch(doc, patch, expected):
    assert apply_json_patch(doc, patch) == expected


@pytest.mark.parametrize("patch", [
    [{"op": "replace", "path": "/missing", "value": 1}], [{"op": "remove", "path": "/a/5"}],
    [{"op": "test", "path": "/a", "value": 2}], [{"op": "add", "path": "no-slash", "value": 1}],
    [{"op": "frobnicate", "path": "/a"}], [{"op": "add", "path": "/x/y", "value": 1}], {"op": "add"},
    [{"op": "add", "path": "/a/01", "value": 1}],
])
def test_json_patch_refuses(patch):
    doc = {"a": [1]}
    with pytest.raises(JsonPatchError):
        apply_json_patch(doc, patch)
    assert doc == {"a": [1]}  # left as it was
