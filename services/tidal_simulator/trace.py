"""An openb-format trace (node and pod CSVs) as a workload, read with the
placement team's parser (`tidal_simulator.openb`).

- `arrive_only`: the FGD paper's protocol (`openb_replay.arrival_sequence`):
  pods sorted by name, shuffled with the seed, inflated by uniform sampling
  with replacement to `inflate` × cluster GPU capacity; they arrive in that
  order (one per second of scenario time) and never leave.
- otherwise pods arrive at their `creation_time` (relative to the first)
  and leave at their `deletion_time`, when the trace has both.

Trace nodes carry no NUMA detail (`openb.node_topology`). Pods are spread
over `tenants` tenants by a hash of their trace name (clones share their
original's tenant); QoS LS and Guaranteed are latency-sensitive, the rest
best-effort; usage is a constant fraction of the request.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from tidal_schemas import GpuAsk
from tidal_simulator.openb import TraceError, TracePod, node_topology, read_nodes, read_pods
from tidal_simulator.openb_replay import arrival_sequence

from .pods import sim_pod
from .usage_curves import Constant, UsageSpec
from .workload import SimNode, SimPodSpec, Workload

_LS = {"LS", "Guaranteed"}


def tenant_of(name: str, tenants: int) -> str:
    """The tenant a trace pod is given: crc32 of its original name mod `tenants`."""
    base = name.split("-tuned-")[0]
    return f"tenant-{zlib.crc32(base.encode()) % max(tenants, 1)}"


def trace_pod(pod: TracePod, tenants: int, usage: UsageSpec, arrive_s: float,
              duration_s: float | None = None) -> SimPodSpec:
    """A trace pod as a simulated pod."""
    tenant = tenant_of(pod.name, tenants)
    gpu = GpuAsk(count=pod.num_gpu, milli=pod.gpu_milli if pod.num_gpu else 1000, models=list(pod.gpu_spec))
    event = sim_pod(tenant, pod.name, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, gpu=gpu,
                        tenant=tenant, user=tenant, qos="LS" if pod.qos in _LS else "BE",
                        priority=100 if pod.qos in _LS else 0, evictable=pod.qos not in _LS)
    return SimPodSpec(event, usage, arrive_s, duration_s)


def trace_workload(nodes_csv: str | Path, pods_csv: str | Path, *, seed: int = 42, arrive_only: bool = True,
                   inflate: float | None = 1.3, tenants: int = 4, usage_level: float = 0.5,
                   tick_s: float | None = None) -> tuple[Workload, list[TracePod]]:
    """The workload of a trace, and the trace pods in arrival order (the
    report's fragmentation measure needs their shapes); TraceError naming
    the file, line and column when a CSV is not a usable trace."""
    nodes, pods = read_nodes(nodes_csv), read_pods(pods_csv)
    if not nodes:
        raise TraceError(f"{nodes_csv}: no nodes")
    usage = UsageSpec(cpu=Constant(level=usage_level), memory=Constant(level=usage_level))
    sim_nodes = tuple(SimNode(node_topology(n)) for n in nodes)
    capacity = 1000 * sum(n.gpus for n in nodes)
    if arrive_only:
        sequence = arrival_sequence(pods, seed, capacity, inflate) if inflate else list(pods)
        specs = tuple(trace_pod(p, tenants, usage, float(i)) for i, p in enumerate(sequence))
        duration = float(len(sequence))
        tick = tick_s or 1.0
    else:
        sequence = sorted(pods, key=lambda p: (p.creation_time or 0, p.name))
        first = min((p.creation_time or 0 for p in sequence), default=0)
        specs = tuple(trace_pod(p, tenants, usage, float((p.creation_time or first) - first),
                                float(p.deletion_time - p.creation_time)
                                if p.deletion_time and p.creation_time is not None
                                and p.deletion_time > p.creation_time else None)
                      for p in sequence)
        duration = max((s.arrive_s for s in specs), default=0.0) + 1.0
        tick = tick_s or max(duration / 500.0, 1.0)
    source = {"kind": "openb", "nodes": str(nodes_csv), "pods": str(pods_csv), "seed": seed,
              "arrive_only": arrive_only, "inflate": inflate if arrive_only else None, "trace_pods": len(pods)}
    workload = Workload(name=Path(pods_csv).stem, nodes=sim_nodes, pods=specs, tick_s=tick, duration_s=duration,
                        source=source)
    return workload, list(sequence)
