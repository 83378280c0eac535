"""Tidal node agent, machine-facing core: topology from sysfs, usage from
procfs and cgroups, the kubelet-compatible CPU allocator, the exclusive-CPU
checkpoint and cgroup actuation (freeze, thaw, cpuset). No bus wiring here."""

from tidal_runtime.exports import lazy_exports

# The public entry points (tools on top import these, never the modules).
PUBLIC = {
    "AgentCore": "agent_core:AgentCore",
    "Publish": "authority:Publish",
    "books": "books",
    "AUDIT_KINDS": "audit:KINDS",
    "CgroupFs": "cgroups:CgroupFs",
    "CgroupWatch": "cgroup_watch:CgroupWatch",
    "follow_cgroups": "cgroup_watch:follow_cgroups",
    "build_node_topology": "inventory:build_node_topology",
    "read_topology": "sysfs:read_topology",
    "Outcome": "cgroups:Outcome",
    "PodCpuset": "cgroups:PodCpuset",
    "format_cpuset": "cpuset:format_cpuset",
    "GpuDevicePlugin": "device_plugin:GpuDevicePlugin",
    "gpu_units": "gpu_units",
    "build_metrics": "sampling:build_metrics",
    "PodSample": "usage:PodSample",
    "TopologySettings": "settings:TopologySettings",
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
