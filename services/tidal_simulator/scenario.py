"""Scenario files: a small cluster, pods with usage over time, and what is
expected to happen (oversell and hotspot what-ifs). YAML, validated by the
pydantic schema below; any problem is one `ScenarioError` line naming the
field, e.g. `demo.yaml: field 'pods.2.usage.cpu.peak': Input should be
greater than or equal to 0`.

    name: hotspot
    tick_s: 10
    duration_s: 300
    nodes:
      - {name: n1, numa_cpus: [8, 8], memory_mib: 65536}
    pods:
      - {name: batch, replicas: 3, tenant: team-a, cpu_milli: 3000, qos: BE,
         node: n1, numa: [1], usage: {cpu: {kind: constant, level: 0.9}}}
    expect:
      - {kind: frozen-before, pod: team-a/batch-0, then: team-a/batch-1}
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tidal_schemas import GpuAsk, TenantConfig
from tidal_schemas.common import CpuPolicy, repeated
from tidal_schemas.envelope import describe_validation_error
from tidal_simulator.topology_builder import make_topology

from .expectations import Expectation
from .pods import sim_pod
from .usage_curves import UsageSpec
from .workload import SimNode, SimPodSpec, Workload


# Sizes a scenario may reach: far above any what-if worth simulating, low
# enough that reading a hostile file never hangs or exhausts memory.
MAX_NODES = 10_000  # in all, counts expanded
MAX_CPUS_PER_NODE = 1024
MAX_CPUS = 500_000  # in all
MAX_GPUS_PER_NODE = 64
MAX_PODS = 100_000  # in all, replicas expanded
MAX_TICKS = 1_000_000
MAX_AMOUNT = 2**53  # milli-CPU, MiB


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message is one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NodeSpec(_Strict):
    name: str = Field(min_length=1, max_length=200)
    count: int = Field(1, ge=1, le=MAX_NODES, description="more than 1: nodes NAME-0 … NAME-(count-1)")
    numa_cpus: list[int] = Field(default_factory=lambda: [8], min_length=1, max_length=64)
    memory_mib: int = Field(65536, gt=0, le=MAX_AMOUNT)
    gpus: int = Field(0, ge=0, le=MAX_GPUS_PER_NODE)
    gpu_model: str = "A100"
    reserved_cpus: list[int] = Field(default_factory=list)
    exclusive_cpus: bool = True
    pool: str = "default"
    background: dict[int, float] = Field(default_factory=dict, description="CPU load per NUMA node, 0..1")
    system_memory_mib: int = Field(0, ge=0, le=MAX_AMOUNT)

    @model_validator(mode="after")
    def _sane(self) -> "NodeSpec":
        if any(c <= 0 for c in self.numa_cpus) or sum(self.numa_cpus) > MAX_CPUS_PER_NODE:
            raise ValueError(f"numa_cpus must all be positive, at most {MAX_CPUS_PER_NODE} in all")
        bad = [k for k, v in self.background.items() if not 0 <= v <= 1 or not 0 <= k < len(self.numa_cpus)]
        if bad:
            raise ValueError(f"background: NUMA ids must exist and loads be within 0..1 (bad: {bad})")
        return self

    def names(self) -> list[str]:
        return [self.name] if self.count == 1 else [f"{self.name}-{i}" for i in range(self.count)]


class GpuSpec(_Strict):
    count: int = Field(0, ge=0)
    milli: int = Field(1000, ge=1, le=1000)
    models: list[str] = Field(default_factory=list)
    kind: Literal["physical", "virtual"] | None = None


class PodSpec(_Strict):
    name: str = Field(min_length=1, max_length=200)
    namespace: str | None = None
    tenant: str = "default"
    user: str = "default"
    replicas: int = Field(1, ge=1, le=MAX_PODS, description="more than 1: pods NAME-0 … NAME-(replicas-1)")
    cpu_milli: int = Field(1000, ge=0, le=MAX_AMOUNT)
    memory_mib: int = Field(1024, ge=0, le=MAX_AMOUNT)
    gpu: GpuSpec = GpuSpec()
    exclusive_cpus: bool = False
    cpu_policy: CpuPolicy | None = None
    qos: Literal["LS", "BE"] = "BE"
    priority: int = Field(0, ge=-(2**31), le=2**31 - 1, description="as Kubernetes: a 32-bit integer")
    evictable: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    arrive_s: float = Field(0.0, ge=0)
    every_s: float = Field(0.0, ge=0, description="replica i arrives at arrive_s + i · every_s")
    duration_s: float | None = Field(None, gt=0)
    node: str | None = Field(None, description="already running there when the simulation starts")
    numa: list[int] = Field(default_factory=list, max_length=1,
                            description="pin a pre-placed pod to the shared CPUs of this NUMA node (as a move by "
                                        "its node's agent, which moves to one NUMA node)")
    usage: UsageSpec = UsageSpec()

    def names(self) -> list[str]:
        return [self.name] if self.replicas == 1 else [f"{self.name}-{i}" for i in range(self.replicas)]


class Scenario(_Strict):
    name: str = "scenario"
    seed: int = 0
    tick_s: float = Field(10.0, gt=0)
    duration_s: float = Field(600.0, gt=0)
    nodes: list[NodeSpec] = Field(min_length=1)
    tenants: list[TenantConfig] = Field(default_factory=list)
    pods: list[PodSpec] = Field(default_factory=list)
    expect: list[Expectation] = Field(default_factory=list)


def parse_scenario(document: object, where: str = "scenario") -> Scenario:
    """Validate a parsed YAML document; ScenarioError naming the first bad field."""
    if not isinstance(document, dict):
        raise ScenarioError(f"{where}: a scenario must be a mapping, got {type(document).__name__}")
    try:
        return Scenario.model_validate(document)
    except ValidationError as exc:
        raise ScenarioError(f"{where}: {describe_validation_error(exc)}") from None


def load_scenario(path: str | Path) -> Workload:
    """Read, validate and expand a scenario file into a workload."""
    path = Path(path)
    try:
        # bytes: PyYAML reports a bad encoding as a YAMLError; libyaml scans a hostile megabyte 20x faster
        document = yaml.load(path.read_bytes(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    except OSError as exc:
        raise ScenarioError(f"{path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: PyYAML's int() of a 5,000-digit number
        raise ScenarioError(f"{path}: not valid YAML: {(str(exc).splitlines() or ['?'])[0][:300]}") from None
    except RecursionError:  # PyYAML's parser recurses once per level of nesting
        raise ScenarioError(f"{path}: not valid YAML: nested too deeply") from None
    return scenario_workload(parse_scenario(document, str(path)), str(path))


def _check_size(scenario: Scenario, where: str) -> None:
    """ScenarioError when the expanded scenario would pass the MAX_ limits;
    checked before anything is expanded."""
    nodes = sum(spec.count for spec in scenario.nodes)
    cpus = sum(spec.count * sum(spec.numa_cpus) for spec in scenario.nodes)
    pods = sum(spec.replicas for spec in scenario.pods)
    ticks = scenario.duration_s / scenario.tick_s
    for field, value, limit, what in (("nodes", nodes, MAX_NODES, "nodes"), ("nodes", cpus, MAX_CPUS, "CPUs"),
                                      ("pods", pods, MAX_PODS, "pods"), ("tick_s", ticks, MAX_TICKS, "ticks")):
        if value > limit:
            raise ScenarioError(f"{where}: field '{field}': {value:.0f} {what} in all, over the limit of {limit}")


def scenario_workload(scenario: Scenario, where: str = "scenario") -> Workload:
    """Expand node counts and pod replicas; check cross references."""
    _check_size(scenario, where)
    nodes: list[SimNode] = []
    for i, spec in enumerate(scenario.nodes):
        for name in spec.names():
            try:
                topology = make_topology(name, spec.numa_cpus, gpus=spec.gpus, model=spec.gpu_model,
                                         memory_mib=spec.memory_mib, exclusive=spec.exclusive_cpus,
                                         reserved=spec.reserved_cpus)
            except (ValidationError, ValueError) as exc:
                raise ScenarioError(f"{where}: field 'nodes.{i}': {_first_line(exc)}") from None
            topology = topology.model_copy(update={"pool": spec.pool})
            nodes.append(SimNode(topology, dict(spec.background), spec.system_memory_mib))
    if twice := repeated(n.topology.node for n in nodes):
        raise ScenarioError(f"{where}: field 'nodes': node names repeat: {', '.join(twice)}")
    numa_count = {n.topology.node: len(n.topology.numa_nodes) for n in nodes}
    pods: list[SimPodSpec] = []
    for i, spec in enumerate(scenario.pods):
        if spec.node is not None and spec.node not in numa_count:
            raise ScenarioError(f"{where}: field 'pods.{i}.node': no node {spec.node!r} in the scenario")
        if spec.numa and (spec.node is None or any(not 0 <= m < numa_count[spec.node] for m in spec.numa)):
            raise ScenarioError(f"{where}: field 'pods.{i}.numa': needs `node` and NUMA ids of that node")
        for r, name in enumerate(spec.names()):
            try:
                pod = sim_pod(spec.namespace or spec.tenant, name, cpu_milli=spec.cpu_milli,
                                  memory_mib=spec.memory_mib, gpu=GpuAsk(**spec.gpu.model_dump()),
                                  tenant=spec.tenant, user=spec.user, qos=spec.qos, priority=spec.priority,
                                  evictable=spec.evictable, exclusive_cpus=spec.exclusive_cpus,
                                  cpu_policy=spec.cpu_policy, labels=spec.labels)
            except (ValidationError, ValueError) as exc:
                raise ScenarioError(f"{where}: field 'pods.{i}': {_first_line(exc)}") from None
            pods.append(SimPodSpec(pod, spec.usage, spec.arrive_s + r * spec.every_s, spec.duration_s, spec.node,
                                   tuple(spec.numa)))
    if twice := repeated(p.key for p in pods):
        raise ScenarioError(f"{where}: field 'pods': pod names repeat: {', '.join(twice)}")
    return Workload(name=scenario.name, nodes=tuple(nodes), pods=tuple(pods), tenants=tuple(scenario.tenants),
                    expectations=tuple(scenario.expect), tick_s=scenario.tick_s, duration_s=scenario.duration_s,
                    source={"kind": "scenario", "file": where, "seed": scenario.seed})


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return describe_validation_error(exc)
    return str(exc).splitlines()[0]
