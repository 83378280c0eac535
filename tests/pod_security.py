"""The Pod Security Standards' `restricted` profile (kubernetes.io/docs/
concepts/security/pod-security-standards, as of v1.30), every control of
`baseline` and `restricted`, as a pure check of one pod spec: the list of
what breaks it, empty when the pod-security admission would admit it into
a namespace enforcing `restricted`. Linux pods only (spec.os unset)."""

from __future__ import annotations

from typing import Any

# baseline: the capabilities a container may add; restricted: NET_BIND_SERVICE only
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_CAPABILITIES = {"NET_BIND_SERVICE"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                "secret"}
SECCOMP = {"RuntimeDefault", "Localhost"}


def containers(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{kind}[{c.get('name')}]", c) for kind in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(kind) or []]


def violations(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> list[str]:
    """What of pod spec `spec` (and its pod's annotations) `restricted` forbids."""
    found: list[str] = []
    pod = spec.get("securityContext") or {}
    every = containers(spec)
    # baseline
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(f"host namespaces: {field}")
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        found.append("hostProcess: pod")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            found.append(f"hostPath volume {volume['name']}")
        elif kinds - VOLUME_TYPES:
            found.append(f"volume type {sorted(kinds - VOLUME_TYPES)} of {volume['name']}")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and \
                value != "runtime/default" and not value.startswith("localhost/"):
            found.append(f"AppArmor annotation {key}: {value}")
    for sysctl in pod.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"unsafe sysctl {sysctl['name']}")
    for where, context in [("pod", pod)] + [(n, c.get("securityContext") or {}) for n, c in every]:
        if (context.get("appArmorProfile") or {}).get("type", "RuntimeDefault") not in SECCOMP:
            found.append(f"AppArmor profile of {where}")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            found.append(f"SELinux options of {where}")
        if context.get("runAsUser") == 0:
            found.append(f"runAsUser 0 in {where}")
        if "seccompProfile" in context and context["seccompProfile"].get("type") not in SECCOMP:
            found.append(f"seccomp profile {context['seccompProfile'].get('type')} in {where}")
    pod_non_root, pod_seccomp = pod.get("runAsNonRoot") is True, "seccompProfile" in pod
    for name, container in every:
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"privileged {name}")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"hostProcess: {name}")
        if context.get("procMount", "Default") != "Default":
            found.append(f"procMount of {name}")
        if any(p.get("hostPort") for p in container.get("ports") or []):
            found.append(f"hostPort in {name}")
        capabilities = context.get("capabilities") or {}
        added = set(capabilities.get("add") or [])
        if added - BASELINE_CAPABILITIES or added - RESTRICTED_CAPABILITIES:
            found.append(f"capabilities added to {name}: {sorted(added - RESTRICTED_CAPABILITIES)}")
        # restricted
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{name} does not drop ALL capabilities")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name} allows privilege escalation")
        if context.get("runAsNonRoot") is False or not (pod_non_root or context.get("runAsNonRoot") is True):
            found.append(f"{name} may run as root (runAsNonRoot)")
        if not (pod_seccomp or "seccompProfile" in context):
            found.append(f"{name} has no seccomp profile")
    return found


def pod_templates(objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, its pod template) for every object that makes pods."""
    found = []
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] == "CronJob":
            found.append((obj, spec["jobTemplate"]["spec"]["template"]))
        elif obj["kind"] == "Pod":
            found.append((obj, obj))
        elif "template" in spec and "spec" in spec["template"]:
            found.append((obj, spec["template"]))
    return found
