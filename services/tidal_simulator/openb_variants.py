"""Stress variants of the openb trace: pod lists in the trace's own format,
derived from the default trace with chosen shares of each kind of pod, to
check that a GPU strategy tuned on one mix holds on others (issue 18).

A variant keeps the base trace's size N and fixes how many pods of each
kind it holds; every pod is a copy of a base pod of its kind drawn
uniformly with replacement (so each kind keeps the base's shapes, CPU and
memory), named `<variant>-<i>`, in a seeded shuffled order. Each kind's
pods are its base pods repeated as evenly as the count allows (every base
pod ⌊count / base⌋ times, a seeded draw without replacement for the rest),
so a variant that keeps a kind's count keeps its very pods. Kinds:

- `cpu`:   no GPU;
- `share`: part of one GPU (gpu_milli < 1000);
- `whole`: one whole GPU;
- `multi`: 2 or more whole GPUs.

With G = N − cpu pods, the counts are

    cpu   = round(cpu_scale · base share of cpu pods · N)
    share = round(share of GPU pods · G)      (default: the base's share)
    multi = round(multi_scale · base share of multi among whole-GPU pods · (G − share))
    whole = G − share − multi

(whole-GPU pods are `whole` and `multi`; measuring multi among them keeps
"all GPU pods are shares" meaningful).

Then round(constrained · G) GPU pods, drawn uniformly, get a GPU-model
constraint (`gpu_spec`): the models of 1 to `max_models` (equally likely)
distinct nodes drawn uniformly from the nodes that could host the pod on
an empty cluster (enough GPUs, CPU and memory), so a constraint is always
satisfiable and models are asked for as they are spread across nodes.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .openb import TraceNode, TracePod

KINDS = ("cpu", "share", "whole", "multi")
COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
           "creation_time", "deletion_time", "scheduled_time")


def kind(pod: TracePod) -> str:
    """Which of KINDS a pod is."""
    if not pod.num_gpu:
        return "cpu"
    if pod.num_gpu > 1:
        return "multi"
    return "share" if pod.gpu_milli < 1000 else "whole"


@dataclass(frozen=True)
class Variant:
    """What a variant changes; None keeps the base trace's share."""

    name: str
    cpu_scale: float = 1.0
    share: float | None = None  # of GPU pods
    multi_scale: float = 1.0
    constrained: float = 0.0  # of GPU pods
    max_models: int = 2


# The bench's set: each moves one share across the range issue 18 asks for.
VARIANTS = (
    Variant("cpu050", cpu_scale=0.5), Variant("cpu200", cpu_scale=2.0), Variant("cpu300", cpu_scale=3.0),
    Variant("share60", share=0.6), Variant("share80", share=0.8), Variant("share100", share=1.0),
    Variant("spec10", constrained=0.10), Variant("spec20", constrained=0.20), Variant("spec35", constrained=0.35),
    Variant("multi250", multi_scale=2.5), Variant("multi500", multi_scale=5.0),
)
BY_NAME = {v.name: v for v in VARIANTS}


def kind_counts(base: Sequence[TracePod], variant: Variant, size: int | None = None) -> dict[str, int]:
    """Pods of each kind the variant holds (see the module docstring)."""
    n = len(base) if size is None else size
    have = {k: 0 for k in KINDS}
    for pod in base:
        have[kind(pod)] += 1
    base_gpu = len(base) - have["cpu"]
    cpu = min(round(variant.cpu_scale * have["cpu"] / len(base) * n), n)
    gpu = n - cpu
    share_of_gpu = have["share"] / base_gpu if variant.share is None and base_gpu else (variant.share or 0.0)
    share = round(share_of_gpu * gpu)
    base_whole = have["whole"] + have["multi"]
    multi = round(variant.multi_scale * have["multi"] / base_whole * (gpu - share)) if base_whole else 0
    if not 0 <= share + multi <= gpu:
        raise ValueError(f"{variant.name}: {share} share and {multi} multi-GPU pods do not fit in {gpu} GPU pods")
    counts = {"cpu": cpu, "share": share, "whole": gpu - share - multi, "multi": multi}
    missing = [k for k, c in counts.items() if c and not have[k]]
    if missing:
        raise ValueError(f"{variant.name}: the base trace has no {', '.join(missing)} pods to draw from")
    return counts


def generate(base: Sequence[TracePod], nodes: Sequence[TraceNode], variant: Variant, seed: int,
             size: int | None = None) -> list[TracePod]:
    """The variant's pods (`size`, default len(base)), the same for the same seed."""
    rng = np.random.default_rng([seed, *variant.name.encode()])
    ordered = sorted(base, key=lambda p: p.name)  # independent of the file's row order
    pool = {k: [p for p in ordered if kind(p) == k] for k in KINDS}
    pods = [pod for k, count in kind_counts(ordered, variant, size).items() for pod in _draw(pool[k], count, rng)]
    pods = [pods[i] for i in rng.permutation(len(pods))]
    gpu_rows = [i for i, p in enumerate(pods) if p.num_gpu]
    chosen = rng.choice(len(gpu_rows), size=round(variant.constrained * len(gpu_rows)), replace=False)
    hosts: dict[tuple[int, int, int], list[str]] = {}
    for i in sorted(int(gpu_rows[j]) for j in chosen):
        need = (pods[i].num_gpu, pods[i].cpu_milli, pods[i].memory_mib)
        if need not in hosts:
            hosts[need] = host_models(pods[i], nodes)
        pods[i] = replace(pods[i], gpu_spec=constraint(hosts[need], variant.max_models, rng))
    return [replace(p, name=f"{variant.name}-{i:05d}") for i, p in enumerate(pods)]


def _draw(pool: list[TracePod], count: int, rng: np.random.Generator) -> list[TracePod]:
    # each pod ⌊count / len⌋ times, then distinct random ones for the remainder
    if not count:
        return []
    repeats, rest = divmod(count, len(pool))
    return pool * repeats + [pool[int(i)] for i in np.sort(rng.choice(len(pool), size=rest, replace=False))]


def host_models(pod: TracePod, nodes: Sequence[TraceNode]) -> list[str]:
    """The model of every node able to host `pod` on an empty cluster."""
    hosts = [n.model for n in nodes if n.model and n.gpus >= pod.num_gpu and n.cpu_milli >= pod.cpu_milli
             and n.memory_mib >= pod.memory_mib]
    if not hosts:
        raise ValueError(f"no node can host {pod.name}: it cannot be given a satisfiable GPU-model constraint")
    return hosts


def constraint(hosts: Sequence[str], max_models: int, rng: np.random.Generator) -> tuple[str, ...]:
    """Models of 1..max_models (equally likely) distinct hosts drawn uniformly
    from `hosts` (one model per able node: a model's chance follows its
    node count)."""
    wanted = min(int(rng.integers(1, max_models + 1)), len(set(hosts)))
    models: set[str] = set()
    while len(models) < wanted:
        models.add(hosts[int(rng.integers(len(hosts)))])
    return tuple(sorted(models))


def shares(pods: Sequence[TracePod]) -> dict[str, float]:
    """The shares a pod list holds, as a variant asks for them: CPU-only of
    all pods; share and constrained of GPU pods; multi of whole-GPU pods."""
    count = lambda test, among: sum(1 for p in among if test(p)) / len(among) if among else 0.0  # noqa: E731
    gpu = [p for p in pods if p.num_gpu]
    whole = [p for p in gpu if kind(p) != "share"]
    return {"cpu": count(lambda p: not p.num_gpu, pods), "share": count(lambda p: kind(p) == "share", gpu),
            "multi": count(lambda p: kind(p) == "multi", whole), "constrained": count(lambda p: bool(p.gpu_spec), gpu)}


def write_pods(path: str | Path, pods: Sequence[TracePod]) -> None:
    """Write `pods` as an 11-column openb pod CSV (`read_pods` reads it back)."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(COLUMNS)
        for p in pods:
            out.writerow([p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, "|".join(p.gpu_spec), p.qos,
                          p.phase, *("" if t is None else t for t in (p.creation_time, p.deletion_time,
                                                                        p.scheduled_time))])
