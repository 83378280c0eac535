"""The NATS overlay's node agent credentials (issue 55 item 3): nothing per
node in any Secret or ConfigMap. The agents get their NATS credentials at run
time from the credential issuer with a projected ServiceAccount token, and
the issuer may create tokenreviews and nothing else."""

from __future__ import annotations

import yaml

from test_manifests import bundle, env_of, named, of_kind, workload_for, workloads
from tidal_cli.nats_config_cmd import k8s_secrets

ISSUER = "tidal-credentials"


def _agent(objects: list[dict]) -> tuple[dict, dict]:
    pod = workload_for(objects, "topology")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_the_agent_sends_a_projected_token_for_the_issuers_audience_and_mounts_no_secret_of_its_own() -> None:
    objects = bundle("overlays/nats")
    pod, container = _agent(objects)
    env = {k: v.get("value") for k, v in env_of(container).items()}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    (source,) = volumes["bus-token"]["projected"]["sources"]
    token = source["serviceAccountToken"]
    issuer_env = {k: v.get("value") for k, v in env_of(named(objects, "Deployment", ISSUER)["spec"]["template"]
                                                           ["spec"]["containers"][0]).items()}
    assert token["audience"] == issuer_env["TIDAL_CREDENTIALS_AUDIENCE"] == "tidal-bus"
    assert 600 <= token["expirationSeconds"] <= 86400  # the kubelet refreshes it at 80 % of that
    assert env["TIDAL_TOPOLOGY_CREDENTIALS_TOKEN_FILE"] == f"{mounts['bus-token']['mountPath']}/{token['path']}"
    assert pod["automountServiceAccountToken"] is False  # the API server's own audience never reaches the agent
    assert issuer_env["TIDAL_CREDENTIALS_AGENT_SERVICE_ACCOUNT"] == f"tidal-node:{pod['serviceAccountName']}"
    assert issuer_env["TIDAL_CONFIG"] == env["TIDAL_CONFIG"]  # the same bus namespace and cluster as the agents
    assert env_of(named(objects, "Deployment", ISSUER)["spec"]["template"]["spec"]["containers"][0])[
        "TIDAL_CLUSTER"] == env_of(container)["TIDAL_CLUSTER"]
    # https to the issuer's Service, verified with the CA alone (not the issuer's key)
    service = named(objects, "Service", ISSUER)
    assert env["TIDAL_TOPOLOGY_CREDENTIALS_URL"] == \
        f"https://{ISSUER}.tidal-system.svc:{service['spec']['ports'][0]['port']}/v1/node-credentials"
    ca = volumes["credentials-ca"]["secret"]
    assert ca["secretName"] == "tidal-credentials-ca" and ca["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    # the issued .creds (its own seed in it) on a memory volume; no Secret, no TIDAL_BUS_CREDS_FILE
    assert volumes["bus-credentials"]["emptyDir"]["medium"] == "Memory"
    assert env["TIDAL_TOPOLOGY_CREDENTIALS_FILE"].startswith(mounts["bus-credentials"]["mountPath"] + "/")
    assert "TIDAL_BUS_CREDS_FILE" not in env and "TIDAL_BUS_USER_FILE" not in env
    assert [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v] == ["tidal-credentials-ca"]


def test_what_the_agents_need_is_written_in_their_namespace() -> None:
    """`tidal nats-config --k8s-secrets` writes the issuer's CA where the
    DaemonSet runs (NODE_NAMESPACE, --node-namespace), and the issuer grants
    the ServiceAccount of that namespace: moving the agent moves both."""
    from tidal_cli.issuer_tls import ISSUER_SECRET
    from tidal_cli.nats_config_cmd import NODE_NAMESPACE
    from tidal_cli.webhook_tls import make_webhook_tls

    objects = bundle("overlays/nats")
    agent = workload_for(objects, "topology")
    issuer = named(objects, "Deployment", ISSUER)
    namespace = agent["metadata"]["namespace"]
    assert NODE_NAMESPACE == namespace, "tidal nats-config's --node-namespace default must be the DaemonSet's"
    env = {k: v.get("value") for k, v in env_of(issuer["spec"]["template"]["spec"]["containers"][0]).items()}
    assert env["TIDAL_CREDENTIALS_AGENT_SERVICE_ACCOUNT"] == \
        f"{namespace}:{agent['spec']['template']['spec']['serviceAccountName']}"
    tls = make_webhook_tls(["tidal-credentials"])
    written = {(d["metadata"]["namespace"], d["metadata"]["name"]): d
               for d in yaml.safe_load_all(k8s_secrets("config", {}, issuer=tls))}
    assert written[(namespace, "tidal-credentials-ca")]["stringData"] == {"ca.crt": tls.ca_pem}  # no key
    assert ("tidal-system", ISSUER_SECRET) in written and issuer["metadata"]["namespace"] == "tidal-system"


def test_the_issuer_may_create_tokenreviews_and_nothing_else() -> None:
    objects = bundle("overlays/nats")
    role = named(objects, "ClusterRole", ISSUER)
    assert role["rules"] == [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
                              "verbs": ["create"]}]
    binding = named(objects, "ClusterRoleBinding", ISSUER)
    assert binding["roleRef"]["name"] == ISSUER
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ISSUER, "namespace": "tidal-system"}]
    deployment = named(objects, "Deployment", ISSUER)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == ISSUER and container["command"] == ["python", "-m", "tidal_credentials"]
    assert pod["securityContext"]["runAsNonRoot"] is True and deployment["spec"]["replicas"] >= 2
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    secrets = sorted(v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v)
    assert secrets == ["tidal-credentials-tls", "tidal-nats-account-signing"]
    assert all(v["secret"]["defaultMode"] & 0o007 == 0 for v in pod["volumes"] if "secret" in v)
    assert [p["spec"]["maxUnavailable"] for p in of_kind(objects, "PodDisruptionBudget")
            if p["metadata"]["name"] == ISSUER] == [1]
    assert not [w for w in workloads(bundle("overlays/kafka")) if w["metadata"]["name"] == ISSUER]


def test_no_secret_grows_with_nodes() -> None:
    """What `tidal nats-config --k8s-secrets` writes is the same at any number
    of nodes: no node is listed, and each Secret has a fixed set of keys."""
    from tidal_bus.nats_permissions import users

    seeds = {user: f"SU-{user}" for user in users("tidal", "default", [])}
    documents = list(yaml.safe_load_all(k8s_secrets("config", seeds)))
    assert not [d for d in documents if "topology" in d["metadata"]["name"]]
    assert all(set(d["stringData"]) <= {"user", "seed", "creds", "nats.conf"} for d in documents)
    for obj in of_kind(bundle("overlays/nats"), "ConfigMap") + of_kind(bundle("overlays/nats"), "Secret"):
        assert "node-" not in yaml.safe_dump(obj.get("data") or {}), obj["metadata"]["name"]
