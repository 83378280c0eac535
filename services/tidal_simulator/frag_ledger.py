"""Cluster-wide GPU figures after every arrival, for the report: allocated
and idle milli-GPU, and fragmentation Σ_n F_n by the placement team's
measure (`gpu_frag.FragModel`, openb METHOD.md §2) against the typical pods
of the workload. Rows are recomputed only for nodes that changed."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tidal_placement import FragModel
from tidal_placement import Shape, typical_workload

from .model import ClusterModel
from .workload import SimPodSpec


def pod_shape(spec: SimPodSpec) -> Shape:
    """The pod's shape as the fragmentation measure sees it."""
    gpu = spec.pod.gpu
    return Shape(spec.pod.requests.cpu_milli, gpu.milli if gpu.count else 0, gpu.count, tuple(sorted(gpu.models)))


class FragLedger:
    """Per-node CPU left and milli-GPU left per device, and each node's F_n."""

    def __init__(self, model: ClusterModel, shapes: Iterable[Shape]) -> None:
        self.model = model
        self.names = sorted(model.nodes)
        self.row = {name: r for r, name in enumerate(self.names)}
        self.devices = {n: [g.id for g in model.nodes[n].topology.gpus if g.healthy] for n in self.names}
        width = max([len(d) for d in self.devices.values()] + [1])
        self.models = tuple(sorted({g.model for n in self.names for g in model.nodes[n].topology.gpus}))
        model_id = {m: i for i, m in enumerate(self.models)}
        self.gpu_model = np.array([model_id[model.nodes[n].topology.gpus[0].model] if self.devices[n] else -1
                                   for n in self.names], dtype=np.int64)
        self.cpu_left = np.zeros(len(self.names), dtype=np.int64)
        self.gpu_left = np.zeros((len(self.names), width), dtype=np.int64)
        self.capacity_milli = 1000 * sum(len(d) for d in self.devices.values())
        shapes = list(shapes)
        self.frag = FragModel(typical_workload(shapes)) if shapes else None
        self.node_frag = np.zeros(len(self.names))
        for name in self.names:
            self.refresh(name)

    def refresh(self, node: str) -> None:
        """Re-read one node from the model."""
        r = self.row[node]
        held = self.model.requested_on(node)
        self.cpu_left[r] = max(self.model.allocatable[node].cpu_milli - held.cpu_milli, 0)
        free = self.model.gpu_free(node)
        self.gpu_left[r, :] = 0
        for j, gpu in enumerate(self.devices[node]):
            self.gpu_left[r, j] = free.get(gpu, 0)
        if self.frag is not None:
            self.node_frag[r] = self.frag.node_frag(self.cpu_left[r:r + 1], self.gpu_left[r:r + 1],
                                                    self.gpu_model[r:r + 1], self.models)[0]

    @property
    def idle_milli(self) -> int:
        return int(self.gpu_left.sum())

    @property
    def allocated_milli(self) -> int:
        return self.capacity_milli - self.idle_milli

    @property
    def frag_milli(self) -> float:
        return float(self.node_frag.sum())
