"""What the GPU device plugin shows the kubelet and the container runtime
(pure): the unit devices it advertises as `tidal.dev/gpu-milli` and what a
container given a decision's GPUs gets (docs/last-mile.md, "GPUs: the
device plugin"). Which decision a container gets is `gpu_ledger`.

**Units.** Every GPU device d — a physical GPU, or a MIG instance, which is a
device of its own — is advertised as 1000 unit devices `<p(d)>-m<k>`,
k = 0..999. p(d) is d's id (NVML's id is the UUID, 40 characters), or
`gpu-<20 hex digits of sha256(id)>` when the id would make a unit id longer
than the API's 63 characters. A unit is healthy when its device is and, for
a MIG instance, its parent is.

**Response** (`container_response`): `NVIDIA_VISIBLE_DEVICES` = the decided
GPUs' runtime names (the GPU id: a UUID, `GPU-…` or `MIG-…`, where NVML
reported it) comma-separated in the decision's order, `TIDAL_DECISION_ID`, and
CDI devices `nvidia.com/gpu=<name>` each. A share below 1000 milli shares its
GPU through NVIDIA MPS, whose client limits are (NVIDIA MPS docs, "Appendix:
Environment Variables"):

- `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: the percentage of each visible
  device's threads a client may use (Volta and later), only ever narrowing
  the control daemon's setting; here ⌊milli / 10⌋ (at least 1), the smallest
  partial share's (one value covers every device);
- `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`: comma-separated `<device>=<amount>`,
  the device by ordinal or UUID, the amount with a unit (`0=1G`, `0=512M`);
  here `<ordinal>=<MiB>M`, the ordinal being the GPU's place in the
  container's `NVIDIA_VISIBLE_DEVICES` (what CUDA numbers it inside), MiB =
  ⌊memory_mib · milli / 1000⌋, left out for a GPU of unknown memory. By
  ordinal, not UUID: NVIDIA's device plugin (v0.15.0) moved to ordinals, as
  limits set by UUID were not applied on some drivers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from tidal_schemas import Gpu
from tidal_schemas.common import GPU_MILLI

MAX_DEVICE_ID = 63  # the device plugin API's limit on a device ID
CDI_KIND = "nvidia.com/gpu"


def unit_prefix(gpu_id: str) -> str:
    """The prefix of a GPU's unit ids (see the module docstring)."""
    if len(gpu_id) + len(f"-m{GPU_MILLI - 1}") <= MAX_DEVICE_ID:
        return gpu_id
    return "gpu-" + hashlib.sha256(gpu_id.encode()).hexdigest()[:20]


def unit_ids(gpu_id: str) -> tuple[str, ...]:
    """The 1000 unit device ids of a GPU, k = 0..999."""
    prefix = unit_prefix(gpu_id)
    return tuple(f"{prefix}-m{k}" for k in range(GPU_MILLI))


def split_unit(unit: str) -> tuple[str, int]:
    """(prefix, k) of a unit id; (unit, -1) when it is not one."""
    prefix, sep, k = unit.rpartition("-m")
    return (prefix, int(k)) if sep and k.isascii() and k.isdigit() else (unit, -1)


def healthy_gpus(gpus: Sequence[Gpu], health: Mapping[str, bool]) -> frozenset[str]:
    """Ids of the GPUs that are healthy, with their parent for a MIG instance."""
    own = {g.id: health.get(g.id, g.healthy) for g in gpus}
    return frozenset(g.id for g in gpus if own[g.id] and (g.parent is None or own.get(g.parent, True)))


def runtime_name(gpu: Gpu) -> str:
    """How the container runtime knows the GPU: its id, the UUID where NVML
    named it (an inventory file should list UUIDs too)."""
    return gpu.id


def container_response(decision_id: str, shares: Sequence[tuple[str, int]],
                       gpus: Mapping[str, Gpu]) -> tuple[dict[str, str], tuple[str, ...]]:
    """(envs, CDI device names) for a container given a decision's GPU
    `shares` (gpu id, milli) (see the module docstring); each in `gpus`."""
    names = [runtime_name(gpus[g]) for g, _ in shares]
    envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(names), "TIDAL_DECISION_ID": decision_id}
    partial = [(ordinal, gpus[g], m) for ordinal, (g, m) in enumerate(shares) if m < GPU_MILLI]
    if partial:
        envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, min(m for _, _, m in partial) // 10))
        pins = [f"{ordinal}={max(1, g.memory_mib * m // GPU_MILLI)}M" for ordinal, g, m in partial if g.memory_mib]
        if pins:
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(pins)
    return envs, tuple(f"{CDI_KIND}={name}" for name in names)
