"""Settings of the node agent (env prefix TIDAL_TOPOLOGY_; the node name
also from TIDAL_NODE_NAME, which the DaemonSet sets from spec.nodeName)."""

from __future__ import annotations

import socket
from typing import ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import SettingsConfigDict

from tidal_kubelet_api import DEVICE_PLUGIN_DIR
from tidal_runtime import ServiceSettings
from tidal_runtime.configuration import ENV_ONLY

from .cpuset import MAX_CPU_ID, parse_cpuset


def _cpu_id(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5 and int(text) <= MAX_CPU_ID


class TopologySettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_TOPOLOGY_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = "topology"

    node_name: str = Field(default_factory=socket.gethostname,
                           validation_alias=AliasChoices("TIDAL_NODE_NAME", "TIDAL_TOPOLOGY_NODE_NAME", "node_name"),
                           json_schema_extra=ENV_ONLY, description="the node this agent runs on (the DaemonSet "
                           "sets TIDAL_NODE_NAME from spec.nodeName); default: the host name")
    sysfs_root: str = Field("/sys", description="where the host's /sys is mounted (CPU and NUMA topology)")
    procfs_root: str = Field("/proc", description="where the host's /proc is mounted")
    cgroup_root: str = Field("/sys/fs/cgroup", description="where the host's cgroup hierarchy is mounted "
                             "(read-write: the agent writes pods' cpusets)")
    cgroup_parent: str = Field("kubepods", description="the kubepods parent cgroup holding pod cgroups")
    cgroup_version: Literal["auto", "v1", "v2"] = Field("auto", description="the cgroup hierarchy's version; "
                                                        "auto: detected under cgroup_root")
    reserved_cpus: str = Field("", description="cpuset kept for the system, like kubelet --reserved-cpus")
    exclusive_cpus: bool = Field(True, description="offer exclusive CPUs (like cpu-manager-policy=static)")
    numa_override: str = Field("", description="cpu:numa pairs that replace sysfs, e.g. 0:0,1:1")
    gpu_inventory_file: str | None = Field(None, description="GPUs listed in a file, read when NVML is not "
                                           "there (tests, nodes without the NVIDIA library)")
    device_plugin: bool | None = Field(None, description="serve the GPU device plugin (tidal.dev/gpu-milli) to "
                                       "the kubelet; unset: when the node has GPUs")
    device_plugin_dir: str = Field(DEVICE_PLUGIN_DIR, description="the kubelet's device plugin directory "
                                   "(its kubelet.sock, the plugin's own socket)")
    gpu_health_s: float = Field(5.0, gt=0, description="how often GPU health is read (NVML, else the inventory file)")
    interval_s: float = Field(10.0, gt=0, description="usage sampling interval")
    state_file: str = Field("/var/lib/tidal/cpu-state.json", description="exclusive CPU assignment checkpoint")
    bind_timeout_s: float = Field(60.0, gt=0, description="a decision not confirmed bound by then gives its CPUs back")
    rescan_s: float = Field(1.0, gt=0, description="how often pod cgroups are scanned even when no inotify event came (new pods and containers are pinned as they appear)")
    kubelet_cpu_state: str = Field("/var/lib/kubelet/cpu_manager_state",
                                   description="kubelet's CPU manager checkpoint: its policy must be none")
    audit_interval_s: float = Field(30.0, gt=0, description="node audit period, besides after every change")
    pool: str = Field("default", description="the node pool this node belongs to (oversell's pool_policies)")
    credentials_url: str | None = Field(None, description="NATS: the credential issuer (python -m "
                                        "tidal_credentials); set, the agent logs in with a user JWT the issuer "
                                        "grants its ServiceAccount token, renewed before it expires, instead of "
                                        "TIDAL_BUS_CREDS_FILE")
    credentials_token_file: str = Field("/var/run/secrets/tidal/bus-token/token", description="the projected "
                                        "ServiceAccount token (audience tidal-bus) sent to the issuer")
    credentials_ca_file: str | None = Field(None, description="CA of the issuer's certificate (https)")
    credentials_file: str = Field("/run/tidal/bus/creds", description="where the issued .creds file is "
                                  "written (a memory volume: the agent's own seed is in it)")

    @field_validator("reserved_cpus")
    @classmethod
    def _cpuset(cls, value: str) -> str:
        parse_cpuset(value) if value.strip() else None
        return value

    @field_validator("numa_override")
    @classmethod
    def _override(cls, value: str) -> str:
        cls.parse_override(value)
        return value

    @staticmethod
    def parse_override(value: str) -> dict[int, int]:
        """`0:0,1:1` -> {cpu: numa}; ValueError naming the bad pair. Ids are
        ASCII digits up to MAX_CPU_ID (isdigit() alone takes "²", which
        int() then refuses with a message naming no setting)."""
        mapping = {}
        for pair in filter(None, (p.strip() for p in value.split(","))):
            cpu, sep, numa = (part.strip() for part in pair.partition(":"))
            if not sep or not all(_cpu_id(part) for part in (cpu, numa)):
                shown = pair if len(pair) <= 40 else pair[:40] + "…"
                raise ValueError(f"numa_override: {shown!r} is not cpu:numa (ids 0..{MAX_CPU_ID})")
            mapping[int(cpu)] = int(numa)
        return mapping

    @property
    def reserved(self) -> list[int]:
        return parse_cpuset(self.reserved_cpus) if self.reserved_cpus.strip() else []
