"""Small value types shared by several events.

Units are fixed across Tidal: CPU in milli-CPUs, memory in MiB, GPU shares in
milli-GPUs (1000 = one whole GPU), utilisation as a fraction in [0, 1].
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Qos = Literal["LS", "BE"]
"""Latency-sensitive (the higher class) or best-effort."""

CpuPolicy = Literal["spread", "single-numa", "auto"]
GpuKind = Literal["physical", "virtual"]

GPU_MILLI = 1000
"""One whole GPU, in milli-GPU (the unit of every GPU share)."""

MAX_INT = 2**63 - 1
"""Integers on the wire are 64-bit: what orjson writes back, and what readers
in Go, Java or Kafka tooling can hold. A bigger one is refused on the way in
rather than accepted and then impossible to publish."""

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_INT)]
Int64 = Annotated[int, Field(ge=-MAX_INT - 1, le=MAX_INT)]
Name = Annotated[str, Field(min_length=1, max_length=253)]
PodName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^/]+$")]
"""A pod's namespace or name. Kubernetes allows no '/' in either, and Tidal
joins the two with one (`pod_key`): refusing it keeps the key one-to-one,
so pods (a, b/c) and (a/b, c) can never share the key a/b/c."""

MAX_NUMA_ID = 1023
"""Linux numbers at most 1024 NUMA nodes (CONFIG_NODES_SHIFT ≤ 10)."""
MAX_CPU_ID = (1 << 16) - 1
"""Far above any machine's logical CPUs (Linux NR_CPUS ≤ 8192)."""
NumaId = Annotated[int, Field(ge=0, le=MAX_NUMA_ID)]
CpuId = Annotated[int, Field(ge=0, le=MAX_CPU_ID)]


class Record(BaseModel):
    """Base of nested value objects: immutable, tolerant of unknown fields.
    No infinities or NaN: JSON cannot carry them (they would go out as null)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class Resources(Record):
    """An amount of node resources."""

    cpu_milli: NonNegInt = 0
    memory_mib: NonNegInt = 0
    gpu_milli: NonNegInt = 0


def pod_key(namespace: str, name: str) -> str:
    """The key of a pod, `namespace/name`: the one encoding every event about
    a pod is keyed and partitioned by. One-to-one because events refuse a
    '/' in either part (`PodName`)."""
    # Not interned: the interpreter's table of interned strings would keep an entry per pod
    # (about 50 bytes at 150,000 pods). A service keeping a pod in several tables gives
    # them the key object it kept first (placement: `pod_records.PodRecords.key_of`).
    return f"{namespace}/{name}"


def repeated(values: Iterable[Hashable]) -> list:
    """The values that occur more than once, sorted: one pass over a
    Counter, so 60,000 names cost milliseconds, not minutes."""
    return sorted(value for value, count in Counter(values).items() if count > 1)
