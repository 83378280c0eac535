"""Tidal node agent, machine-facing core: topology from sysfs, usage from
procfs and cgroups, the kubelet-compatible CPU allocator, the exclusive-CPU
checkpoint and cgroup actuation (freeze, thaw, cpuset). No bus wiring here."""
