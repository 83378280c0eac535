"""Which CPU manager policy the node's kubelet runs, from its checkpoint
(`/var/lib/kubelet/cpu_manager_state`, JSON with `policyName`).

The agent pins every pod's cpuset itself, as kubelet's static policy would:
two authorities over the same cgroup files would undo each other (kubelet's
reconcile loop rewrites container cpusets every 10 s, and on cgroup v1 its
writes fail once the agent has narrowed the pod's cpuset). So with the
exclusive-CPU switch on the agent requires kubelet's `none` policy.
"""

from __future__ import annotations

import json
from pathlib import Path


def kubelet_policy(path: str | Path) -> tuple[str | None, str]:
    """(policy name, '') from kubelet's CPU manager checkpoint, or (None, why
    it cannot be told)."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None, f"no kubelet CPU manager state at {path}"
    except (OSError, ValueError) as exc:
        return None, f"kubelet CPU manager state {path} unreadable: {str(exc)[:200]}"
    policy = doc.get("policyName") if isinstance(doc, dict) else None
    if not isinstance(policy, str):
        return None, f"kubelet CPU manager state {path} names no policyName"
    return policy, ""


def check_kubelet(path: str | Path, exclusive_cpus: bool) -> tuple[bool, str]:
    """(may start, what to log): with exclusive CPUs on, a kubelet whose
    policy is not `none` is refused; one that cannot be told is allowed
    with a warning."""
    policy, why = kubelet_policy(path)
    if not exclusive_cpus:
        return True, ""
    if policy is None:
        return True, f"{why}: cannot check that kubelet runs --cpu-manager-policy=none, as the agent requires"
    if policy != "none":
        return False, (f"kubelet runs --cpu-manager-policy={policy}: the agent pins every pod's cpuset itself and "
                       "requires kubelet's none policy (or set TIDAL_TOPOLOGY_EXCLUSIVE_CPUS=false and leave "
                       "CPU sets to kubelet)")
    return True, ""
