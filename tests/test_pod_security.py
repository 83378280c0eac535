"""Pod Security (issue 55 item 2): every pod template of the rendered install
files meets the `restricted` profile (tests/pod_security.py), except the
node agent's, which alone runs in its own namespace, tidal-node, the only
one enforcing `privileged`; and the checker refuses a pod breaking each
rule, so it can fail."""

from __future__ import annotations

import copy

import pytest
import yaml

from pod_security import pod_templates, violations
from tidal_cli import manifests

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
LEVEL = "pod-security.kubernetes.io/enforce"
NODE_NAMESPACE = "tidal-node"


def documents(name: str) -> list[dict]:
    return [d for d in yaml.load_all((manifests.INSTALL / name).read_text(), Loader=LOADER) if d]


@pytest.mark.parametrize("name", sorted(manifests.OVERLAYS))
def test_every_pod_meets_its_namespaces_level_and_only_the_node_agent_is_privileged(name):
    objects = documents(name)
    levels = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objects if o["kind"] == "Namespace"}
    assert {n: labels[LEVEL] for n, labels in levels.items()} == {"tidal-system": "restricted",
                                                                   NODE_NAMESPACE: "privileged"}
    assert levels["tidal-system"]["pod-security.kubernetes.io/enforce-version"].startswith("v1.")
    templates = pod_templates(objects)
    assert len(templates) >= 8  # the services, the webhook, the brokers (and the NATS issuer)
    privileged = []
    for workload, template in templates:
        namespace = workload["metadata"]["namespace"]
        assert namespace in levels, workload["metadata"]["name"]
        if levels[namespace][LEVEL] == "restricted":
            problems = violations(template["spec"], template.get("metadata", {}).get("annotations"))
            assert not problems, f"{workload['kind']}/{workload['metadata']['name']}: {problems}"
        else:
            privileged.append((workload["kind"], workload["metadata"]["name"]))
    assert privileged == [("DaemonSet", "tidal-topology")]
    # and it does need it: the checker sees why
    (agent,) = [t for w, t in templates if w["metadata"]["name"] == "tidal-topology"]
    assert any("hostPath" in p for p in violations(agent["spec"]))


RESTRICTED = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "c", "image": "i", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
    "volumes": [{"name": "v", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x"}}],
}
C = ("containers", 0, "securityContext")


def _set(spec: dict, path: tuple, value) -> dict:
    spec = copy.deepcopy(spec)
    *parents, last = path
    node = spec
    for key in parents:
        node = node[key] if isinstance(key, int) else node.setdefault(key, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return spec


BROKEN = {
    "hostNetwork": (("hostNetwork",), True),
    "hostPID": (("hostPID",), True),
    "hostIPC": (("hostIPC",), True),
    "hostProcess": (C + ("windowsOptions",), {"hostProcess": True}),
    "privileged": (C + ("privileged",), True),
    "a baseline capability": (C + ("capabilities",), {"drop": ["ALL"], "add": ["CHOWN"]}),
    "SYS_ADMIN": (C + ("capabilities",), {"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
    "no drop ALL": (C + ("capabilities",), {"drop": ["NET_RAW"]}),
    "hostPath": (("volumes",), [{"name": "h", "hostPath": {"path": "/"}}]),
    "nfs volume": (("volumes",), [{"name": "n", "nfs": {"server": "s", "path": "/"}}]),
    "hostPort": (("containers", 0, "ports"), [{"containerPort": 80, "hostPort": 80}]),
    "AppArmor unconfined": (C + ("appArmorProfile",), {"type": "Unconfined"}),
    "SELinux type": (("securityContext", "seLinuxOptions"), {"type": "spc_t"}),
    "SELinux user": (C + ("seLinuxOptions",), {"user": "root"}),
    "procMount": (C + ("procMount",), "Unmasked"),
    "seccomp unconfined": (C + ("seccompProfile",), {"type": "Unconfined"}),
    "no seccomp": (("securityContext", "seccompProfile"), None),
    "unsafe sysctl": (("securityContext", "sysctls"), [{"name": "kernel.msgmax", "value": "1"}]),
    "privilege escalation unset": (C + ("allowPrivilegeEscalation",), None),
    "privilege escalation": (C + ("allowPrivilegeEscalation",), True),
    "runAsNonRoot unset": (("securityContext", "runAsNonRoot"), None),
    "runAsNonRoot false in a container": (C + ("runAsNonRoot",), False),
    "runAsUser 0": (C + ("runAsUser",), 0),
}


def test_the_checker_passes_a_restricted_pod():
    assert violations(RESTRICTED) == []
    # what may be set either way: per container instead of the pod, NET_BIND_SERVICE, Localhost seccomp
    per_container = _set(_set(RESTRICTED, ("securityContext",), {}), C, {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
        "runAsNonRoot": True, "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}})
    assert violations(per_container) == []


@pytest.mark.parametrize("rule", BROKEN)
def test_the_checker_refuses_a_pod_breaking_each_rule(rule):
    path, value = BROKEN[rule]
    assert violations(_set(RESTRICTED, path, value)), rule


def test_the_checker_reads_apparmor_annotations_and_init_containers():
    assert violations(RESTRICTED, {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"})
    with_init = copy.deepcopy(RESTRICTED)
    with_init["initContainers"] = [{"name": "init", "image": "i"}]
    assert any("initContainers[init]" in v for v in violations(with_init))
