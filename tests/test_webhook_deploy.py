"""How the webhook is deployed and registered: `tidal webhook-cert` (a CA,
a serving certificate the CA signed for the Service's names, the Secret and
the MutatingWebhookConfiguration with that caBundle), the manifests in
k8s/webhook/ and k8s/base/webhook.yaml agreeing with it and with the
service's settings, and the webhook on a local stack (`tidal up`,
`tidal simulate`): its own certificate and an HTTPS socket that survives a
restart, registered with the stand-in API server."""

from __future__ import annotations

import base64
import copy
import json
import ssl
import urllib.request
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from conftest import ROOT
from tidal_cli.main import main
from tidal_cli.stack import Stack
from tidal_cli.webhook_tls import service_names, webhook_configuration
from tidal_simulator.kube_api import KubeApiServer
from tidal_webhook import WebhookSettings
from webhook_parts import status_review

K8S = ROOT / "k8s"
K8S_VERSION = "1.30.0"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _of(docs: list[dict], kind: str) -> dict:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def test_webhook_cert_writes_the_secret_and_the_registration(tmp_path, capsys):
    out = tmp_path / "webhook.yaml"
    assert main(["webhook-cert", "--namespace", "tidal-system", "--out", str(out), "--tls-dir",
                 str(tmp_path / "tls")]) == 0
    printed = capsys.readouterr().err
    docs = _docs(out)
    secret, configuration = _of(docs, "Secret"), _of(docs, "MutatingWebhookConfiguration")
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert secret["type"] == "kubernetes.io/tls" and secret["metadata"]["name"] == "tidal-webhook-tls"
    ca_bundle = configuration["webhooks"][0]["clientConfig"]["caBundle"]
    assert f"caBundle: {ca_bundle}" in printed
    ca = x509.load_pem_x509_certificate(base64.b64decode(ca_bundle))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)  # raises when the CA did not sign it
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert names == service_names("tidal-webhook", "tidal-system")
    assert "tidal-webhook.tidal-system.svc" in names  # the name the API server calls a Service by
    assert (tmp_path / "tls" / "tls.key").stat().st_mode & 0o077 == 0
    # the configuration printed is the one in k8s/webhook/, its CA filled in
    template = _docs(K8S / "webhook" / "mutatingwebhookconfiguration.yaml")[0]
    printed_config = copy.deepcopy(configuration)
    del printed_config["webhooks"][0]["clientConfig"]["caBundle"]
    assert printed_config == template


@pytest.mark.parametrize("argv", [["--ip", "not-an-ip"], ["--url", "http://x/y"], ["--days", "0"]])
def test_webhook_cert_refuses_bad_input(argv, capsys):
    assert main(["webhook-cert", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(("tidal: ", "tidal webhook-cert: ")) and err.count("\n") == 1, err  # one line


def test_the_registration_is_what_the_issue_asks_for():
    (hook,) = _docs(K8S / "webhook" / "mutatingwebhookconfiguration.yaml")[0]["webhooks"]
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["sideEffects"], hook["matchPolicy"],
            hook["admissionReviewVersions"]) == ("Ignore", 2, "None", "Equivalent", ["v1"])
    (rule,) = hook["rules"]
    assert rule == {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes/status"],
                    "scope": "Cluster"}
    # the stand-in API server takes it as kube-apiserver would (and a PATCH operation it refuses)
    api = KubeApiServer()
    local = webhook_configuration("Y2E=", url="https://127.0.0.1:1/mutate")
    assert api.add_webhook_configuration(local)["webhooks"][0]["rules"] == [rule]
    local["webhooks"][0]["rules"][0]["operations"] = ["PATCH"]
    with pytest.raises(ValueError, match="operations"):
        api.add_webhook_configuration(local)


def test_the_manifests_agree_with_each_other_and_the_settings():
    base = _docs(K8S / "base" / "webhook.yaml")
    deployment, service = _of(base, "Deployment"), _of(base, "Service")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    (tls_volume,) = [v for v in pod["volumes"] if v["name"] == "webhook-tls"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "webhook-tls"]
    assert env["TIDAL_WEBHOOK_TLS_CERT_FILE"] == f"{mount['mountPath']}/tls.crt"
    assert env["TIDAL_WEBHOOK_TLS_KEY_FILE"] == f"{mount['mountPath']}/tls.key"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["https"] == int(env["TIDAL_WEBHOOK_HTTPS_PORT"])
    https = next(p for p in service["spec"]["ports"] if p["name"] == "https")
    assert https["targetPort"] == "https"
    # k8s/webhook/: the Service, port and path; cert-manager's Certificate writes the Secret mounted
    client = _docs(K8S / "webhook" / "mutatingwebhookconfiguration.yaml")[0]["webhooks"][0]["clientConfig"]
    assert client["service"] == {"namespace": "tidal-system", "name": service["metadata"]["name"],
                                 "path": WebhookSettings.model_fields["path"].default, "port": https["port"]}
    managed = _docs(K8S / "webhook" / "cert-manager.yaml")
    certificate = _of(managed, "Certificate")
    assert certificate["spec"]["secretName"] == tls_volume["secret"]["secretName"]
    assert certificate["spec"]["dnsNames"] == service_names("tidal-webhook", "tidal-system")
    injected = _of(managed, "MutatingWebhookConfiguration")
    namespace, name = injected["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    assert (namespace, name) == (certificate["metadata"]["namespace"], certificate["metadata"]["name"])
    del injected["metadata"]["annotations"]
    assert injected == _docs(K8S / "webhook" / "mutatingwebhookconfiguration.yaml")[0]
    assert _of(managed, "Issuer")["metadata"]["name"] == certificate["spec"]["issuerRef"]["name"]


def _review(webhook, node: str = "n1") -> dict:
    body = json.dumps(status_review({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                                     "status": {"allocatable": {"cpu": "8"}}})).encode()
    request = urllib.request.Request(webhook.url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5, context=ssl.create_default_context(
            cadata=webhook.tls.ca_pem)) as response:
        return json.loads(response.read())


async def test_the_stack_runs_the_webhook_on_its_own_certificate_across_a_restart(tmp_path, namespace):
    with Stack(tmp_path / "stack", nats_port=0, namespace=namespace, cluster="c1", services=["webhook"]) as stack:
        stack.wait_ready(timeout=60)
        webhook = stack.webhook
        assert "no oversold allocatable known for node n1" in _review(webhook)["response"]["status"]["message"]
        url = webhook.url
        stack.kill("webhook")
        stack.restart("webhook")
        stack.wait_ready(timeout=60)
        assert stack.webhook.url == url and _review(stack.webhook)["response"]["allowed"]
        # what `tidal simulate` registers with its stand-in API server
        async with KubeApiServer() as api:
            api.add_node("n1")
            api.add_webhook_configuration(stack.webhook.configuration())
            await api.write_node_status("n1", {"allocatable": {"cpu": "8"}}, user="system:node:n1")
            assert api.admission.calls == [("node-allocatable.tidal.dev", "allowed")]
