"""A seeded synthetic cluster and workload, as a `Scenario` (pure: the
random generator is passed in).

Nodes: a NUMA layout drawn from `layouts`, memory 4 GiB per CPU; a share
`gpu_nodes` of them carry 2, 4 or 8 GPUs of one model from `gpu_models`.
Pods, by `mix` (shares of: batch = shared-CPU best-effort, service =
exclusive-CPU latency-sensitive, share = a part of one GPU, gpu = one whole
GPU, multi = 2 or 4 GPUs), owned by `tenants` tenants (one user each). Usage
curves: constant, diurnal or spike (by `curves`), levels around 0.3–0.9 of
the request. Arrivals are uniform over the first `arrive_within` of the
duration; a share `leave` of the pods leave after 10–50 % of it.
"""

from __future__ import annotations

from typing import get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tidal_schemas.common import CpuPolicy

from .scenario import GpuSpec, NodeSpec, PodSpec, Scenario
from .usage_curves import Constant, Diurnal, Spike, UsageSpec

KINDS = ("batch", "service", "share", "gpu", "multi")


class SyntheticSpec(BaseModel):
    """The knobs of the generator (`tidal simulate --synthetic k=v,…`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: int = Field(20, ge=1, le=5000)
    pods: int = Field(200, ge=0, le=100_000)
    tenants: int = Field(3, ge=1, le=100)
    gpu_nodes: float = Field(0.5, ge=0, le=1)
    gpu_models: tuple[str, ...] = ("A100", "T4")
    layouts: tuple[tuple[int, ...], ...] = ((8, 8), (16, 16), (6, 6, 6, 6), (32,))
    mix: tuple[float, float, float, float, float] = (0.35, 0.15, 0.2, 0.25, 0.05)
    curves: tuple[float, float, float] = (0.6, 0.3, 0.1)
    duration_s: float = Field(600.0, gt=0)
    tick_s: float = Field(10.0, gt=0)
    arrive_within: float = Field(0.6, gt=0, le=1)
    leave: float = Field(0.3, ge=0, le=1)
    seed: int = 0


def generate(spec: SyntheticSpec, rng: np.random.Generator, name: str = "synthetic") -> Scenario:
    """A scenario drawn from `rng` by the rules of the module docstring."""
    nodes = [_node(i, spec, rng) for i in range(spec.nodes)]
    has_gpus = any(n.gpus for n in nodes)
    mix = np.array(spec.mix if has_gpus else (*spec.mix[:2], 0, 0, 0), dtype=float)
    mix = mix / mix.sum()
    pods = [_pod(i, spec, rng, KINDS[int(rng.choice(len(KINDS), p=mix))]) for i in range(spec.pods)]
    return Scenario(name=name, seed=spec.seed, tick_s=spec.tick_s, duration_s=spec.duration_s, nodes=nodes,
                    pods=pods)


def _node(i: int, spec: SyntheticSpec, rng: np.random.Generator) -> NodeSpec:
    layout = list(spec.layouts[int(rng.integers(len(spec.layouts)))])
    gpus = int(rng.choice([2, 4, 8])) if spec.gpu_models and rng.random() < spec.gpu_nodes else 0
    model = spec.gpu_models[int(rng.integers(len(spec.gpu_models)))] if gpus else "A100"
    return NodeSpec(name=f"node-{i:03d}", numa_cpus=layout, memory_mib=4096 * sum(layout), gpus=gpus,
                    gpu_model=model, reserved_cpus=[0])


def _curve(spec: SyntheticSpec, rng: np.random.Generator, level: float):
    kind = int(rng.choice(3, p=np.array(spec.curves) / sum(spec.curves)))
    if kind == 1:
        return Diurnal(level=level, amplitude=round(level * float(rng.uniform(0.2, 0.5)), 3),
                       period_s=spec.duration_s, phase_s=round(float(rng.uniform(0, spec.duration_s)), 1))
    if kind == 2:
        start = float(rng.uniform(0.2, 0.7)) * spec.duration_s
        return Spike(level=level, peak=round(min(level * 2.0, 1.2), 3), start_s=round(start, 1),
                     duration_s=round(spec.duration_s * 0.1, 1))
    return Constant(level=level)


def _pod(i: int, spec: SyntheticSpec, rng: np.random.Generator, kind: str) -> PodSpec:
    tenant = f"team-{int(rng.integers(spec.tenants))}"
    level = round(float(rng.uniform(0.3, 0.9)), 3)
    usage = UsageSpec(cpu=_curve(spec, rng, level), memory=Constant(level=round(float(rng.uniform(0.4, 0.8)), 3)))
    arrive = round(float(rng.uniform(0, spec.arrive_within * spec.duration_s)), 1)
    duration = round(float(rng.uniform(0.1, 0.5)) * spec.duration_s, 1) if rng.random() < spec.leave else None
    common = dict(name=f"{kind}-{i:04d}", tenant=tenant, user=f"{tenant}-user", arrive_s=arrive,
                  duration_s=duration, usage=usage)
    if kind == "batch":
        return PodSpec(cpu_milli=int(rng.choice([500, 1000, 2000])), memory_mib=int(rng.choice([1024, 2048, 4096])),
                       qos="BE", evictable=True, **common)
    if kind == "service":
        return PodSpec(cpu_milli=1000 * int(rng.choice([1, 2, 4])), memory_mib=int(rng.choice([2048, 4096, 8192])),
                       exclusive_cpus=True, cpu_policy=str(rng.choice(list(get_args(CpuPolicy)))),
                       qos="LS", priority=100, **common)
    models = [spec.gpu_models[int(rng.integers(len(spec.gpu_models)))]] if rng.random() < 0.3 else []
    if kind == "share":
        gpu = GpuSpec(count=1, milli=int(rng.choice([250, 500])), models=models)
    else:
        gpu = GpuSpec(count=1 if kind == "gpu" else int(rng.choice([2, 4])), models=models)
    return PodSpec(cpu_milli=int(rng.choice([2000, 4000, 8000])), memory_mib=int(rng.choice([8192, 16384])),
                   gpu=gpu, qos="LS", priority=50, **common)


def parse_spec(text: str) -> SyntheticSpec:
    """`nodes=40,pods=400,tenants=4,seed=3` → a spec (pydantic validates the
    values; an unknown key is an error naming it)."""
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"--synthetic: expected key=value, got {part!r}")
        fields[key.strip().replace("-", "_")] = value.strip()
    return SyntheticSpec.model_validate(fields)
