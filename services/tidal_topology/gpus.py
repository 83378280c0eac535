"""GPU inventory of this node: NVML where the driver is present, else an
inventory file, else none. A node without GPUs or without a driver is normal:
the answer is an empty list with the reason, never an exception."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import ValidationError

from tidal_schemas import Gpu

Source = Literal["nvml", "file", "none"]


@dataclass(frozen=True)
class GpuDiscovery:
    """The GPUs found, where they came from, and why (or why none).
    `error` is set when a source exists but is broken (a bad inventory file)."""

    gpus: list[Gpu] = field(default_factory=list)
    source: Source = "none"
    reason: str = ""
    error: bool = False


def discover_gpus(inventory_file: str | Path | None = None, nvml: ModuleType | Any | None = None) -> GpuDiscovery:
    """GPUs from NVML when `pynvml` imports and initialises; otherwise from
    `inventory_file` when given; otherwise none. `nvml` replaces the
    `pynvml` module (for tests and for callers that already loaded it)."""
    nvml_result = read_nvml(nvml)
    if nvml_result.source == "nvml":
        return nvml_result
    if inventory_file is not None:
        file_result = read_inventory_file(inventory_file)
        return GpuDiscovery(file_result.gpus, file_result.source,
                            f"{file_result.reason} (NVML: {nvml_result.reason})", file_result.error)
    return nvml_result


def read_nvml(nvml: ModuleType | Any | None = None) -> GpuDiscovery:
    """Every GPU NVML reports: physical GPUs by UUID (model, memory, NUMA
    node), and each MIG device as kind "virtual" naming its parent's UUID."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return GpuDiscovery(reason="pynvml (nvidia-ml-py) is not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses; no driver is the common case
        return GpuDiscovery(reason=f"NVML did not initialise: {exc}")
    try:
        gpus: list[Gpu] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            parent = _nvml_gpu(nvml, handle, index)
            gpus.append(parent)
            gpus.extend(_nvml_mig_devices(nvml, handle, parent))
        return GpuDiscovery(gpus, "nvml", f"NVML reports {len(gpus)} device(s)")
    except Exception as exc:
        return GpuDiscovery(reason=f"NVML query failed: {exc}", error=True)
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown changes nothing we report
            nvml.nvmlShutdown()


def _text(value: bytes | str) -> str:
    # Older bindings return bytes, newer ones str.
    return value.decode() if isinstance(value, bytes) else value


def _nvml_gpu(nvml: Any, handle: Any, index: int) -> Gpu:
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    numa = None
    if hasattr(nvml, "nvmlDeviceGetNumaNodeId"):
        try:
            numa_id = nvml.nvmlDeviceGetNumaNodeId(handle)
            numa = numa_id if numa_id >= 0 else None
        except Exception:  # not supported on every driver/board
            numa = None
    return Gpu(id=_text(nvml.nvmlDeviceGetUUID(handle)), index=index, model=_text(nvml.nvmlDeviceGetName(handle)),
               kind="physical", memory_mib=memory.total // (1024 * 1024), numa=numa)


def _nvml_mig_devices(nvml: Any, handle: Any, parent: Gpu) -> list[Gpu]:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # GPUs without MIG raise NotSupported
        return []
    if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return []
    devices = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:  # empty MIG slots raise NotFound
            continue
        memory = nvml.nvmlDeviceGetMemoryInfo(mig)
        devices.append(Gpu(id=_text(nvml.nvmlDeviceGetUUID(mig)), index=parent.index, model=parent.model,
                           kind="virtual", parent=parent.id, memory_mib=memory.total // (1024 * 1024),
                           numa=parent.numa))
    return devices


def read_inventory_file(path: str | Path) -> GpuDiscovery:
    """GPUs listed in a JSON file: a list of objects with `id`, `model`,
    `memory_mib`, `kind` ("physical"/"virtual"), `parent`, `numa`. A missing
    file means no GPUs; an unreadable or invalid one is an error value."""
    path = Path(path)
    if not path.exists():
        return GpuDiscovery(reason=f"no inventory file at {path}")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested deeper than json can follow
        return GpuDiscovery(reason=f"inventory file {path} unreadable: {str(exc)[:200] or 'nested too deeply'}",
                            error=True)
    if not isinstance(data, list):
        return GpuDiscovery(reason=f"inventory file {path} must hold a JSON list", error=True)
    gpus = []
    for position, entry in enumerate(data):
        if not isinstance(entry, dict):
            return GpuDiscovery(reason=f"inventory file {path} entry {position} is not an object", error=True)
        try:
            gpus.append(Gpu.model_validate({"index": position, **entry}))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            return GpuDiscovery(reason=f"inventory file {path} entry {position}: {where}: {first['msg']}", error=True)
    problem = _check_parents(gpus)
    if problem:
        return GpuDiscovery(reason=f"inventory file {path}: {problem}", error=True)
    return GpuDiscovery(gpus, "file", f"inventory file {path} lists {len(gpus)} device(s)")


def _check_parents(gpus: list[Gpu]) -> str:
    ids = [g.id for g in gpus]
    if len(set(ids)) != len(ids):
        return "duplicate GPU ids"
    physical = {g.id for g in gpus if g.kind == "physical"}
    for g in gpus:
        if g.kind == "virtual" and g.parent not in physical:
            return f"virtual GPU {g.id} names parent {g.parent!r}, which is not a physical GPU in the file"
    return ""
