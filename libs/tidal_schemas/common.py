"""Small value types shared by several events.

Units are fixed across Tidal: CPU in milli-CPUs, memory in MiB, GPU shares in
milli-GPUs (1000 = one whole GPU), utilisation as a fraction in [0, 1].
"""

from __future__ import annotations

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
    """The key pod events are partitioned by: `namespace/name`."""
    return f"{namespace}/{name}"
