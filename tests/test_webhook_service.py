"""The admission webhook as the API server meets it: a real nats-server
feeds oversell's `node.allocatable` to the real service, which answers
AdmissionReviews over real HTTPS (a CA made in the test); then the stand-in
API server calls it over HTTPS on a kubelet's `PATCH /api/v1/nodes/<n>/status`,
and, the webhook stopped, `failurePolicy` decides."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
from datetime import datetime, timezone

import aiohttp
import pytest

from conftest import make_bus, start_service, stop_service, wait_until
from tidal_cli.webhook_tls import make_webhook_tls
from tidal_clock import ReplayClock, wall_clock
from tidal_schemas import make_envelope
from tidal_simulator.kube_api import ApiError, KubeApiServer, node_object
from tidal_webhook import WebhookService, WebhookSettings
from webhook_parts import granted, kubelet_node, status_review, webhook_configuration

STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture
def tls(tmp_path):
    made = make_webhook_tls(["localhost"], ["127.0.0.1"])
    cert, key, _ = made.write(tmp_path / "tls")
    return made, cert, key


def _settings(url, namespace, cert, key, **extra) -> WebhookSettings:
    return WebhookSettings(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1",
                           https_host="127.0.0.1", https_port=0, tls_cert_file=cert, tls_key_file=key, **extra)


async def _review(service, ca_pem: str, review) -> tuple[int, dict]:
    context = ssl.create_default_context(cadata=ca_pem)
    data = review if isinstance(review, bytes) else json.dumps(review).encode()
    async with aiohttp.ClientSession() as session:
        async with session.post(f"https://127.0.0.1:{service.https_port}/mutate/nodes-status", data=data,
                                ssl=context, headers={"Content-Type": "application/json"}) as response:
            return response.status, await response.json()


def _ops(answer: dict) -> list:
    patch = answer["response"].get("patch")
    return json.loads(base64.b64decode(patch)) if patch else []


async def test_kubelet_status_updates_get_the_newest_oversold_figure_clamped(bus_url, namespace, tls):
    made, cert, key = tls  # on either broker: the figures are read without a group, from a time
    async with make_bus(bus_url, namespace, source="oversell") as bus:
        # n1: 14 CPUs granted (cap 8 × 1.5 = 12), 40 GiB (under the 48 GiB cap); n2 granted less than its kubelet's
        await bus.publish(granted(("n1", 10000, 36864)))
        await bus.publish(granted(("n1", 14000, 40960)))
        await bus.publish(granted(("n2", 4000, 16384)))
        service = WebhookService(_settings(bus_url, namespace, cert, key))
        task = await start_service(service)
        try:
            await wait_until(lambda: len(service.figures.held) == 2, what="both nodes' figures")
            code, answer = await _review(service, made.ca_pem, status_review(kubelet_node("n1")))
            assert code == 200 and answer["response"]["allowed"] and answer["response"]["patchType"] == "JSONPatch"
            ops = {op["path"]: op["value"] for op in _ops(answer)}
            assert ops["/status/allocatable/cpu"] == "12"  # min(14, 8 × 1.5)
            assert ops["/status/allocatable/memory"] == "40Gi"  # the newest of n1's two figures
            assert json.loads(ops["/metadata/annotations"]["tidal.dev/kubelet-allocatable"]) == \
                {"cpu": "8", "memory": "32Gi"}
            # n2: granted below the kubelet's own figure: never below it, nothing to write
            code, answer = await _review(service, made.ca_pem, status_review(kubelet_node("n2")))
            assert code == 200 and _ops(answer) == []
            # a node oversell never spoke of: unchanged, and why
            code, answer = await _review(service, made.ca_pem, status_review(kubelet_node("n9")))
            assert _ops(answer) == [] and "no oversold allocatable known for node n9" in \
                answer["response"]["status"]["message"]
            # someone other than n1's kubelet: unchanged by default
            code, answer = await _review(service, made.ca_pem, status_review(kubelet_node("n1"), user="npd"))
            assert _ops(answer) == [] and "not the kubelet of node n1" in answer["response"]["status"]["message"]
            # a figure published while serving replaces the one held
            await bus.publish(granted(("n1", 9000, 32768)))
            await wait_until(lambda: service.figures.held["n1"][0].cpu_milli == 9000, timeout=20,
                             what="the live figure")
            code, answer = await _review(service, made.ca_pem, status_review(kubelet_node("n1")))
            assert {op["path"]: op["value"] for op in _ops(answer)}["/status/allocatable/cpu"] == "9"
        finally:
            await stop_service(service, task)


async def test_a_figures_age_is_read_on_the_services_clock(nats_server, namespace, tls):
    made, cert, key = tls
    stamped = datetime(2030, 1, 1, tzinfo=timezone.utc)  # ahead of the machine's clock: fresh by it
    async with make_bus(nats_server.url, namespace, source="oversell") as bus:
        await bus.publish_envelope(make_envelope(granted(("n1", 10000, 32768)), cluster="c1", source="oversell",
                                                 time=stamped))
        service = WebhookService(_settings(nats_server.url, namespace, cert, key))
        service.clock = clock = ReplayClock(wall_clock())  # now, so the read from 300 s ago finds the figure
        task = await start_service(service)
        try:
            await wait_until(lambda: "n1" in service.figures.held, what="n1's figure")
            clock.advance_to(stamped.timestamp() + 299)
            code, answer = await _review(service, made.ca_pem, status_review(kubelet_node("n1")))
            assert {op["path"]: op["value"] for op in _ops(answer)}["/status/allocatable/cpu"] == "10"
            clock.advance_to(stamped.timestamp() + 301)  # past max_age_s (300)
            code, answer = await _review(service, made.ca_pem, status_review(kubelet_node("n1")))
            assert _ops(answer) == [] and answer["response"]["status"]["message"] == (
                "the oversold allocatable of node n1 is from 2030-01-01T00:00:00+00:00, older than 300s: unchanged")
        finally:
            await stop_service(service, task)


async def test_a_malformed_review_is_a_400_that_allows_unchanged(nats_server, namespace, tls):
    made, cert, key = tls
    service = WebhookService(_settings(nats_server.url, namespace, cert, key))
    task = await start_service(service)
    try:
        for body, uid in ((b"{not json", ""), (json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(), ""),
                          (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                       "request": {"uid": "u1", "object": "x"}}).encode(), "u1")):
            code, answer = await _review(service, made.ca_pem, body)
            assert code == 400, body
            assert answer["response"] == {"uid": uid, "allowed": True, "status": answer["response"]["status"]}
            assert answer["response"]["status"]["message"].startswith("malformed AdmissionReview")
        assert service.reviews.labels("malformed")._value.get() == 3
        assert service.ready()[0]  # still serving
    finally:
        await stop_service(service, task)


async def test_the_stand_in_calls_the_webhook_over_https_and_honours_failure_policy(nats_server, namespace, tls):
    made, cert, key = tls
    async with make_bus(nats_server.url, namespace, source="oversell") as bus, KubeApiServer() as api:
        await bus.publish(granted(("n1", 14000, 40960)))
        api.add_node("n1", cpu="8", memory="32Gi")
        service = WebhookService(_settings(nats_server.url, namespace, cert, key))
        task = await start_service(service)
        url = f"https://127.0.0.1:{service.https_port}/mutate/nodes-status"
        async with aiohttp.ClientSession() as http:
            created = await http.post(f"{api.url}/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                                      json=webhook_configuration(url, made.ca_bundle))
            assert created.status == 201, await created.text()
            try:
                await wait_until(lambda: "n1" in service.figures.held, what="n1's figure")
                # the kubelet's status patch, as it sends it (its own figure), through the stand-in's REST
                patch = {"status": {"allocatable": {"cpu": "8", "memory": "32Gi"},
                                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
                answer = await http.patch(f"{api.url}/api/v1/nodes/n1/status", json=patch,
                                          headers={"Content-Type": STRATEGIC, "Impersonate-User": "system:node:n1"})
                assert answer.status == 200, await answer.text()
                stored = api.node("n1")
                assert stored["status"]["allocatable"]["cpu"] == "12"
                assert stored["status"]["allocatable"]["memory"] == "40Gi"
                assert stored["status"]["conditions"][0]["reason"] == "KubeletReady"
                assert json.loads(stored["metadata"]["annotations"]["tidal.dev/kubelet-allocatable"]) == \
                    {"cpu": "8", "memory": "32Gi"}
                assert api.admission.calls[-1] == ("node-allocatable.tidal.dev", "patched")
                # the kubelet stand-in's in-process write goes the same way
                node = await api.write_node_status("n1", {"allocatable": {"cpu": "8", "memory": "32Gi"}},
                                                   user="system:node:n1")
                assert node["status"]["allocatable"]["cpu"] == "12"
            finally:
                await stop_service(service, task)
            # Tidal down, failurePolicy Ignore: the kubelet's figure passes unchanged
            node = await api.write_node_status("n1", {"allocatable": {"cpu": "8", "memory": "32Gi"}},
                                               user="system:node:n1")
            assert node["status"]["allocatable"]["cpu"] == "8" and node["status"]["allocatable"]["memory"] == "32Gi"
            assert api.admission.calls[-1][1].startswith("failed: failed to call webhook")
            # failurePolicy Fail: refused with a 500 Status
            fail = webhook_configuration(url, made.ca_bundle, policy="Fail")
            replaced = await http.put(f"{api.url}/apis/admissionregistration.k8s.io/v1/"
                                      "mutatingwebhookconfigurations/tidal-webhook", json=fail)
            assert replaced.status == 200, await replaced.text()
            answer = await http.patch(f"{api.url}/api/v1/nodes/n1/status", json={"status": {"allocatable": {
                "cpu": "7"}}}, headers={"Content-Type": STRATEGIC, "Impersonate-User": "system:node:n1"})
            body = await answer.json()
            assert answer.status == 500 and body["reason"] == "InternalError"
            assert 'failed calling webhook "node-allocatable.tidal.dev"' in body["message"]
            assert api.node("n1")["status"]["allocatable"]["cpu"] == "8"  # not written
            with pytest.raises(ApiError) as refused:
                await api.write_node_status("n1", {"allocatable": {"cpu": "7"}}, user="system:node:n1")
            assert refused.value.code == 500


async def test_a_bad_ca_bundle_is_refused_like_a_tls_failure(nats_server, namespace, tls):
    made, cert, key = tls
    other = make_webhook_tls(["localhost"], ["127.0.0.1"])  # a CA that did not sign the webhook's certificate
    async with make_bus(nats_server.url, namespace, source="oversell") as bus, KubeApiServer() as api:
        await bus.publish(granted(("n1", 14000, 40960)))
        api.create_node(node_object("n1", cpu="8", memory="32Gi"))
        service = WebhookService(_settings(nats_server.url, namespace, cert, key))
        task = await start_service(service)
        try:
            await wait_until(lambda: "n1" in service.figures.held, what="n1's figure")
            url = f"https://127.0.0.1:{service.https_port}/mutate/nodes-status"
            api.add_webhook_configuration(webhook_configuration(url, other.ca_bundle, policy="Fail"))
            with pytest.raises(ApiError) as refused:
                await api.write_node_status("n1", {"allocatable": {"cpu": "8"}}, user="system:node:n1")
            assert refused.value.code == 500 and "CERTIFICATE_VERIFY_FAILED" in refused.value.message
            api.add_webhook_configuration(webhook_configuration(url, other.ca_bundle, policy="Ignore"))
            node = await api.write_node_status("n1", {"allocatable": {"cpu": "8"}}, user="system:node:n1")
            assert node["status"]["allocatable"]["cpu"] == "8"
            # the right CA: patched (the webhook itself was up all along)
            api.add_webhook_configuration(webhook_configuration(url, made.ca_bundle, policy="Fail"))
            node = await api.write_node_status("n1", {"allocatable": {"cpu": "8"}}, user="system:node:n1")
            assert node["status"]["allocatable"]["cpu"] == "12"
        finally:
            await stop_service(service, task)


async def test_a_renewed_certificate_is_served_without_a_restart(nats_server, namespace, tmp_path):
    first = make_webhook_tls(["localhost"], ["127.0.0.1"])
    cert, key, _ = first.write(tmp_path / "tls")
    service = WebhookService(_settings(nats_server.url, namespace, cert, key, tls_reload_s=0.1))
    task = await start_service(service)
    try:
        assert (await _review(service, first.ca_pem, status_review(kubelet_node())))[0] == 200
        second = make_webhook_tls(["localhost"], ["127.0.0.1"])  # renewed in place, as cert-manager does
        second.write(tmp_path / "tls")
        for path in (cert, key):
            stat = path.stat()
            os.utime(path, (stat.st_atime, stat.st_mtime + 10))

        async def served_with_the_new_one() -> None:
            while True:
                try:
                    await _review(service, second.ca_pem, status_review(kubelet_node()))
                    return
                except aiohttp.ClientConnectorCertificateError:
                    await asyncio.sleep(0.05)
        await asyncio.wait_for(served_with_the_new_one(), 10)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await _review(service, first.ca_pem, status_review(kubelet_node()))
    finally:
        await stop_service(service, task)
