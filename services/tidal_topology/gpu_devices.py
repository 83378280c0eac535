"""The node agent's GPU device plugin, as the agent runs it: made from the
settings and the GPUs found at start (`device_plugin_for`), served while
the agent runs, and told each GPU's health every `gpu_health_s` from where
the GPUs were found — NVML where present, the inventory file elsewhere
(`read_health`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tidal_clock import Clock, wall_clock

from .device_plugin import GpuDevicePlugin
from .gpus import GpuDiscovery, Source, read_inventory_file
from .settings import TopologySettings


@dataclass(frozen=True)
class GpuHealth:
    """Health by GPU id; `error`: the source could not be read (health unchanged)."""

    healthy: dict[str, bool] = field(default_factory=dict)
    reason: str = ""
    error: bool = False


def read_health(source: Source, gpu_ids: Sequence[str], inventory_file: str | Path | None,
                nvml: ModuleType | Any | None = None) -> GpuHealth:
    """Each of `gpu_ids`' health, from the source the GPUs were found in:

    - `nvml`: healthy when NVML finds the device by its UUID and answers a
      memory query on it; NVML not initialising leaves every GPU unhealthy
      (no driver: no GPU can be used);
    - `file`: the `healthy` the inventory file gives a GPU; a GPU the file no
      longer lists is unhealthy; an unreadable file is an error;
    - `none`: nothing to say."""
    if source == "file" and inventory_file is not None:
        found = read_inventory_file(inventory_file)
        if found.error:
            return GpuHealth(reason=found.reason, error=True)
        listed = {g.id: g.healthy for g in found.gpus}
        return GpuHealth({gpu: listed.get(gpu, False) for gpu in gpu_ids}, found.reason)
    if source != "nvml":
        return GpuHealth(reason="no GPU source to read health from")
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return GpuHealth(dict.fromkeys(gpu_ids, False), "pynvml (nvidia-ml-py) is not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses: the driver is gone
        return GpuHealth(dict.fromkeys(gpu_ids, False), f"NVML did not initialise: {exc}")
    try:
        return GpuHealth({gpu: _answers(nvml, gpu) for gpu in gpu_ids}, "NVML")
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown changes nothing we report
            nvml.nvmlShutdown()


def _answers(nvml: Any, uuid: str) -> bool:
    try:
        nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByUUID(uuid))
    except Exception:  # lost, fallen off the bus, or an XID that took the device down
        return False
    return True


def device_plugin_for(settings: TopologySettings, found: GpuDiscovery,
                      log: logging.Logger | None = None, clock: Clock = wall_clock) -> GpuDevicePlugin | None:
    """The plugin the settings ask for (`device_plugin`; None: on when the node has GPUs), or None."""
    wanted = settings.device_plugin if settings.device_plugin is not None else bool(found.gpus)
    if not wanted:
        return None
    return GpuDevicePlugin(settings.node_name, found.gpus, plugin_dir=Path(settings.device_plugin_dir), log=log,
                           clock=clock)


async def serve_gpu_devices(plugin: GpuDevicePlugin, source: Source, inventory_file: str | Path | None,
                            interval_s: float, log: logging.Logger, nvml: ModuleType | Any | None = None) -> None:
    """Serve `plugin` until cancelled, telling it every GPU's health every `interval_s`."""
    await plugin.start()
    try:
        while True:
            await asyncio.sleep(interval_s)
            health = await asyncio.to_thread(read_health, source, list(plugin.gpus), inventory_file, nvml)
            if health.error:
                log.warning("GPU health unread, left as it was: %s", health.reason)
                continue
            for gpu, healthy in health.healthy.items():
                plugin.set_health(gpu, healthy)
    finally:
        await plugin.stop()
