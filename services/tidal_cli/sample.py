"""The small sample cluster `tidal demo` simulates: mixed NUMA layouts, GPU
and CPU-only nodes with a background load per NUMA node, two tenants, three
pods running since before the start and a dozen that arrive. It is the
world (machines, tenants, the Pod objects users submit): the simulator
serves it behind its Kubernetes API server and the real bridge reads it."""

from __future__ import annotations

from tidal_schemas import Cpu, Gpu, GpuAsk, GpuBinding, GpuGroup, NodeTopology, NumaNode, Resources, TenantConfig
from tidal_schemas.pod import TenantPermissions
from tidal_simulator.pods import sim_pod
from tidal_simulator.usage_curves import Constant, UsageSpec
from tidal_simulator.workload import SimNode, SimPodSpec, Workload

TICK_S = 5.0
DURATION_S = 30.0  # six ticks of scenario time: every stage shows several rounds


def node(name: str, sockets: int, numa_per_socket: int, cores_per_numa: int, threads: int,
         memory_mib: int, gpus: list[tuple[str, int]] = (), reserved: int = 1) -> NodeTopology:
    """A node with a regular layout; `reserved` CPUs are taken from NUMA 0."""
    cpus, numa_nodes = [], []
    cpu_id = 0
    numa_count = sockets * numa_per_socket
    for numa in range(numa_count):
        ids = []
        for core in range(cores_per_numa):
            for _ in range(threads):
                cpus.append(Cpu(cpu=cpu_id, core=numa * cores_per_numa + core, socket=numa // numa_per_socket,
                                numa=numa))
                ids.append(cpu_id)
                cpu_id += 1
        numa_nodes.append(ids)
    reserved_ids = list(range(reserved))
    numa_models = [
        NumaNode(id=i, cpus=ids, memory_mib=memory_mib // numa_count, capacity_cpus=len(ids),
                 allocatable_cpus=len([c for c in ids if c not in reserved_ids]))
        for i, ids in enumerate(numa_nodes)
    ]
    gpu_models = [Gpu(id=f"{name}-gpu{i}", index=i, model=model, memory_mib=mem, numa=i * numa_count // max(len(gpus), 1))
                  for i, (model, mem) in enumerate(gpus)]
    total = len(cpus)
    return NodeTopology(
        node=name, cpus=cpus, numa_nodes=numa_models, reserved_cpus=reserved_ids, exclusive_cpus=True,
        gpus=gpu_models,
        capacity=Resources(cpu_milli=total * 1000, memory_mib=memory_mib, gpu_milli=len(gpu_models) * 1000),
        allocatable=Resources(cpu_milli=(total - reserved) * 1000, memory_mib=memory_mib - 1024,
                              gpu_milli=len(gpu_models) * 1000),
    )


def sample_workload() -> Workload:
    """The sample cluster (see the module docstring)."""
    nodes = [
        node("cpu-small", 1, 1, 4, 2, 32 * 1024),
        node("cpu-dual", 2, 1, 8, 2, 128 * 1024),
        node("gpu-a100", 2, 1, 16, 2, 512 * 1024, gpus=[("A100", 81920)] * 8),
        node("gpu-t4", 2, 2, 4, 2, 192 * 1024, gpus=[("T4", 15360)] * 4),
    ]
    loads = {"cpu-small": [0.35], "cpu-dual": [0.20, 0.75], "gpu-a100": [0.55, 0.10],
             "gpu-t4": [0.30, 0.92, 0.15, 0.40]}
    machines = tuple(SimNode(topo, dict(enumerate(loads[topo.node])), topo.capacity.memory_mib // 3)
                     for topo in nodes)
    tenants = (
        TenantConfig(tenant="team-vision", quota={"A100": 6000, "cpu": 64000},
                     groups=[GpuGroup(name="a100-pool", bindings=[GpuBinding(
                         node="gpu-a100", gpus=[f"gpu-a100-gpu{i}" for i in range(6)])])]),
        TenantConfig(tenant="team-speech", quota={"T4": 4000},
                     permissions=TenantPermissions(nodes=["gpu-t4", "cpu-dual"])),
    )
    busy = UsageSpec(cpu=Constant(level=0.6), memory=Constant(level=0.5))
    running = (
        SimPodSpec(sim_pod("team-vision", "resnet-0", cpu_milli=8000, memory_mib=32768,
                           gpu=GpuAsk(count=2, models=["A100"]), tenant="team-vision", user="alice", qos="LS",
                           priority=100), busy, node="gpu-a100"),
        SimPodSpec(sim_pod("team-speech", "asr-0", cpu_milli=4000, memory_mib=8192, gpu=GpuAsk(count=1, models=["T4"]),
                           tenant="team-speech", user="carol", qos="LS", priority=100), busy, node="gpu-t4"),
        SimPodSpec(sim_pod("team-vision", "crawler-0", cpu_milli=6000, memory_mib=12288, tenant="team-vision",
                           user="bob", evictable=True), busy, node="cpu-dual"),
    )
    shapes = [
        ("web", "team-speech", "carol", 2000, 4096, False, None, GpuAsk(), "LS"),
        ("etl", "team-vision", "alice", 4000, 16384, True, "spread", GpuAsk(), "LS"),
        ("cache", "team-speech", "dave", 3000, 8192, True, "single-numa", GpuAsk(), "LS"),
        ("train", "team-vision", "alice", 8000, 65536, True, "auto", GpuAsk(count=2, models=["A100"]), "LS"),
        ("infer", "team-speech", "carol", 1000, 4096, False, None, GpuAsk(count=1, milli=500, models=["T4"]), "LS"),
        ("batch", "team-vision", "bob", 2000, 8192, False, None, GpuAsk(), "BE"),
    ]
    arriving = []
    for i in range(12):
        kind, tenant, user, cpu, mem, exclusive, policy, gpu, qos = shapes[i % len(shapes)]
        pod = sim_pod(tenant, f"{kind}-{i}", cpu_milli=cpu, memory_mib=mem, gpu=gpu, tenant=tenant, user=user,
                      qos=qos, priority=100 if qos == "LS" else 0, evictable=qos == "BE", exclusive_cpus=exclusive,
                      cpu_policy=policy)
        arriving.append(SimPodSpec(pod, busy))
    return Workload("demo", machines, running + tuple(arriving), tenants, tick_s=TICK_S, duration_s=DURATION_S,
                    source={"kind": "sample", "name": "tidal demo"})
