"""The openb GPU-sharing trace (Alibaba cluster-trace-gpu-v2023): parse its
node and pod CSVs and turn them into Tidal events / placement requests.

Node CSV: `sn,cpu_milli,memory_mib,gpu,model`. Pod CSV:
`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time`; some traces carry only the
first five columns. `gpu_milli` is per GPU; `gpu_spec` is empty or a
`|`-separated list of allowed models.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from tidal_schemas import Gpu, NodeTopology, Resources

from .decide import PodRequest
from .gpu_workload import Shape


@dataclass(frozen=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    qos: str = ""
    phase: str = ""
    creation_time: int | None = None
    deletion_time: int | None = None
    scheduled_time: int | None = None

    @property
    def shape(self) -> Shape:
        """The pod's shape as the fragmentation measure sees it."""
        return Shape(self.cpu_milli, self.gpu_milli if self.num_gpu else 0, self.num_gpu, self.gpu_spec)

    @property
    def gpu_total(self) -> int:
        return self.num_gpu * self.gpu_milli


def read_nodes(path: str | Path) -> list[TraceNode]:
    """Nodes of a node CSV, in file order."""
    with open(path, newline="") as f:
        return [TraceNode(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"]),
                          (row.get("model") or "").strip()) for row in csv.DictReader(f)]


def read_pods(path: str | Path) -> list[TracePod]:
    """Pods of a pod CSV, in file order (5- or 11-column files)."""
    with open(path, newline="") as f:
        return [_pod(row) for row in csv.DictReader(f)]


def _pod(row: dict[str, str]) -> TracePod:
    spec = (row.get("gpu_spec") or "").strip()
    return TracePod(name=row["name"], cpu_milli=int(row["cpu_milli"]), memory_mib=int(row["memory_mib"]),
                    num_gpu=int(row["num_gpu"]), gpu_milli=int(row["gpu_milli"]),
                    gpu_spec=tuple(sorted(m for m in spec.split("|") if m)), qos=row.get("qos") or "",
                    phase=row.get("pod_phase") or "", creation_time=_int(row.get("creation_time")),
                    deletion_time=_int(row.get("deletion_time")), scheduled_time=_int(row.get("scheduled_time")))


def _int(text: str | None) -> int | None:
    return int(float(text)) if text not in (None, "") else None


def node_topology(node: TraceNode) -> NodeTopology:
    """A topology event for a trace node: its GPUs are `gpu0..gpuN-1`; no NUMA detail."""
    resources = Resources(cpu_milli=node.cpu_milli, memory_mib=node.memory_mib, gpu_milli=1000 * node.gpus)
    gpus = [Gpu(id=f"gpu{i}", index=i, model=node.model or "unknown") for i in range(node.gpus)]
    return NodeTopology(node=node.name, gpus=gpus, capacity=resources, allocatable=resources)


def pod_request(pod: TracePod, key: str | None = None) -> PodRequest:
    """A placement request for a trace pod."""
    return PodRequest(key=key or pod.name, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib,
                      gpu_count=pod.num_gpu, gpu_milli=pod.gpu_milli if pod.num_gpu else 1000,
                      gpu_models=pod.gpu_spec)
