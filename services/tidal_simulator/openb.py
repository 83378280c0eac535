"""The openb GPU-sharing trace (Alibaba cluster-trace-gpu-v2023): parse its
node and pod CSVs and turn them into Tidal events / placement requests.

Node CSV: `sn,cpu_milli,memory_mib,gpu,model`. Pod CSV:
`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time`; some traces carry only the
first five columns. `gpu_milli` is per GPU; `gpu_spec` is empty or a
`|`-separated list of allowed models.

The readers check every cell (see `openb_csv`) and raise `TraceError`
naming the file, line and column of the first bad one. Beyond the types:
names are unique; a node has at most MAX_GPUS GPUs; a pod asks `gpu_milli`
in 1..1000 per GPU when it has GPUs and 0 when it has none, and a share
(below 1000) is of exactly one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tidal_schemas import Gpu, NodeTopology, Resources

from tidal_placement import PodRequest
from tidal_placement import Shape
from .openb_csv import MAX_NAME, Row, TraceError, check_unique, rows

__all__ = ["TraceError", "TraceNode", "TracePod", "node_topology", "pod_request", "read_nodes", "read_pods"]

MAX_GPUS = 64  # per node (openb's largest has 8); also bounds a pod's count


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
    """Nodes of a node CSV, in file order; TraceError on the first bad cell."""
    nodes, lines = [], []
    for row in rows(path, ("sn", "cpu_milli", "memory_mib", "gpu")):
        nodes.append(TraceNode(row.text("sn", required=True), row.whole("cpu_milli"), row.whole("memory_mib"),
                               row.whole("gpu", MAX_GPUS), row.text("model")))
        lines.append((row.line, nodes[-1].name))
    check_unique(path, lines)
    return nodes


def read_pods(path: str | Path) -> list[TracePod]:
    """Pods of a pod CSV, in file order (5- or 11-column files); TraceError
    on the first bad cell."""
    pods, lines = [], []
    for row in rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")):
        pods.append(_pod(row))
        lines.append((row.line, pods[-1].name))
    check_unique(path, lines)
    return pods


def _pod(row: Row) -> TracePod:
    num_gpu, gpu_milli = row.whole("num_gpu", MAX_GPUS), row.whole("gpu_milli", 1000)
    if (num_gpu == 0) != (gpu_milli == 0):
        raise row.error("gpu_milli", f"{gpu_milli} with num_gpu {num_gpu}: a pod with GPUs asks 1..1000 per GPU, "
                                     "one without asks 0")
    if gpu_milli < 1000 and num_gpu > 1:
        raise row.error("gpu_milli", f"{gpu_milli} is a share of one GPU, but num_gpu is {num_gpu}")
    spec = row.text("gpu_spec", longest=10_000)
    models = tuple(sorted(m.strip() for m in spec.split("|") if m.strip()))
    if any(len(m) > 253 for m in models):
        raise row.error("gpu_spec", "names a model longer than 253 characters")
    return TracePod(name=row.text("name", required=True, longest=MAX_NAME), cpu_milli=row.whole("cpu_milli"),
                    memory_mib=row.whole("memory_mib"), num_gpu=num_gpu, gpu_milli=gpu_milli, gpu_spec=models,
                    qos=row.text("qos"), phase=row.text("pod_phase"), creation_time=row.time("creation_time"),
                    deletion_time=row.time("deletion_time"), scheduled_time=row.time("scheduled_time"))


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
