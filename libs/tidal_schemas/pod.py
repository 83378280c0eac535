"""Pod lifecycle and tenant configuration: what there is to place, for whom."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .common import (CpuPolicy, GpuKind, Int64, Name, NonNegInt, NumaId, PodName, Qos, Record, Resources, pod_key,
                     repeated)
from .envelope import Payload, register
from .placement import GpuShare

PodPhase = Literal["pending", "bound", "running", "deleted"]
HOLDING_PHASES = ("bound", "running")
"""Phases in which a pod holds room on its node."""


class GpuAsk(Record):
    """A pod's GPU request: `count` GPUs of `milli` each (1000 = whole GPU;
    below 1000 the pod shares one GPU and count must be 1)."""

    count: NonNegInt = 0
    milli: int = Field(default=1000, ge=1, le=1000)
    models: list[Name] = Field(default_factory=list)
    kind: GpuKind | None = None
    group: str | None = None

    @model_validator(mode="after")
    def _share_is_one_gpu(self) -> "GpuAsk":
        if self.milli < 1000 and self.count > 1:
            raise ValueError("a GPU share (milli < 1000) must ask for exactly one GPU")
        return self

    @property
    def total_milli(self) -> int:
        return self.count * self.milli


@register
class PodLifecycle(Payload):
    """A pod's state change, with everything placement needs to know of it.

    `invalid_reason` is set when the pod's Tidal annotations could not be
    parsed: the pod is then unschedulable until fixed, never silently
    scheduled with defaults.

    A bound or running pod carries what it holds (`numa_cpus`, `gpus`,
    `decision_id`), read back from the decision written on it. One that
    asks for GPUs or exclusive CPUs but carries none of them (a foreign pod,
    or a Tidal pod whose decision annotations are gone or malformed) holds
    them all the same: consumers account it by its requests.
    """

    TYPE = "pod.lifecycle"

    namespace: PodName
    name: PodName
    uid: str = ""
    phase: PodPhase
    node: str | None = None
    requests: Resources = Resources()
    exclusive_cpus: bool = False
    cpu_policy: CpuPolicy | None = None
    gpu: GpuAsk = GpuAsk()
    tenant: str = "default"
    user: str = "default"
    qos: Qos = "BE"
    priority: Int64 = 0
    system_critical: bool = False
    evictable: bool = False
    created_at: AwareDatetime
    started_at: AwareDatetime | None = None
    invalid_reason: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    numa_cpus: dict[NumaId, NonNegInt] = Field(
        default_factory=dict, description="bound pods: exclusive CPUs held on each NUMA node")
    gpus: list[GpuShare] = Field(default_factory=list, description="bound pods: the GPUs (or shares) held")
    decision_id: str = Field("", max_length=253, description="bound pods: the placement decision they were bound by")
    foreign: bool = Field(False, description="bound by another scheduler: counted against its node, never placed")

    def event_key(self) -> str:
        return pod_key(self.namespace, self.name)

    def in_side_lane(self) -> bool:
        return self.phase == "pending"  # what holds nothing yet: only placement acts on it

    @model_validator(mode="after")
    def _exclusive_needs_whole_cpus(self) -> "PodLifecycle":
        if self.exclusive_cpus and (self.requests.cpu_milli == 0 or self.requests.cpu_milli % 1000):
            raise ValueError("exclusive_cpus needs a whole, non-zero number of CPUs in requests.cpu_milli")
        if self.phase in HOLDING_PHASES and not self.node:
            raise ValueError(f"a {self.phase} pod must name its node")
        return self


SPEC_NAMES = ConfigDict(alias_generator=to_camel, populate_by_name=True)
"""The tenant models' fields have a camelCase alias: a `Tenant` object's
spec is written so (Kubernetes' convention); the event on the wire keeps
the snake_case names (dumped by name), and reading takes either."""


class GpuBinding(Record):
    """GPUs of one node that belong to a group."""

    model_config = SPEC_NAMES

    node: Name
    gpus: list[Name] = Field(min_length=1)


class GpuGroup(Record):
    """A named set of (node, GPU) bindings owned by a tenant. Groups may
    share GPUs; accounting is per GPU, not per group."""

    model_config = SPEC_NAMES

    name: Name
    bindings: list[GpuBinding] = Field(min_length=1)
    container_id: str | None = None


class AutoGrouping(Record):
    """Ask Tidal to build the groups from the permitted GPUs."""

    model_config = SPEC_NAMES

    by_model: bool = True
    by_kind: bool = False
    gpus_per_container: NonNegInt | None = None


class TenantPermissions(Record):
    """What a tenant may use. Empty lists mean no restriction."""

    model_config = SPEC_NAMES

    nodes: list[Name] = Field(default_factory=list)
    gpus: list[Name] = Field(default_factory=list)


@register
class TenantConfig(Payload):
    """A tenant's whole configuration: a new one replaces the previous one.
    `deleted` removes the tenant (its quota, permissions and groups); the
    stream keeps each tenant's last event for as long as it is not replaced."""

    TYPE = "tenant.config"
    model_config = SPEC_NAMES

    tenant: Name
    permissions: TenantPermissions = TenantPermissions()
    quota: dict[str, NonNegInt] = Field(
        default_factory=dict,
        description="limit per resource type: a GPU model name (milli-GPU), 'cpu' (milli-CPU) or 'memory' (MiB)",
    )
    groups: list[GpuGroup] = Field(default_factory=list)
    auto_grouping: AutoGrouping | None = None
    deleted: bool = False

    def event_key(self) -> str:
        return self.tenant

    @field_validator("groups")
    @classmethod
    def _groups_named_once(cls, groups: list[GpuGroup]) -> list[GpuGroup]:
        # a field validator, so that the error names `groups` (a Tenant's condition shows it)
        duplicates = repeated(group.name for group in groups)
        if duplicates:
            raise ValueError(f"group names must be unique, repeated: {', '.join(duplicates)}")
        return groups

    @model_validator(mode="after")
    def _one_kind_of_grouping(self) -> "TenantConfig":
        if self.groups and self.auto_grouping:
            raise ValueError("give either groups (manual) or auto_grouping, not both")
        if self.deleted and (self.quota or self.groups or self.auto_grouping or self.permissions.nodes
                             or self.permissions.gpus):
            raise ValueError("a deleted tenant carries no configuration")
        return self


def requested(pod: PodLifecycle) -> Resources:
    """Total resources a pod holds on a node once bound."""
    return Resources(
        cpu_milli=pod.requests.cpu_milli,
        memory_mib=pod.requests.memory_mib,
        gpu_milli=pod.gpu.total_milli,
    )
