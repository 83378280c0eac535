"""GPU inventory: NVML, else an inventory file, else none — never an exception."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from tidal_topology.gpus import discover_gpus, read_inventory_file, read_nvml

MIB = 1024 * 1024


class NvmlError(Exception):
    pass


class FakeNvml:
    """The slice of the pynvml API the reader uses, over a described machine.
    `devices`: list of dicts (uuid, name, mib, numa, mig: list of (uuid, mib) or None per slot)."""

    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, devices, init_error: str | None = None, fail_on_count: bool = False):
        self.devices, self.init_error, self.fail_on_count = devices, init_error, fail_on_count
        self.shutdowns = 0

    def nvmlInit(self):
        if self.init_error:
            raise NvmlError(self.init_error)

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        if self.fail_on_count:
            raise NvmlError("GPU is lost")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def _device(self, handle):
        kind, index, *slot = handle
        device = self.devices[index]
        return device if kind == "gpu" else dict(zip(("uuid", "mib"), device["mig"][slot[0]], strict=True))

    def nvmlDeviceGetUUID(self, handle):
        return self._device(handle)["uuid"].encode()  # old bindings return bytes

    def nvmlDeviceGetName(self, handle):
        return self._device(handle)["name"]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self._device(handle)["mib"] * MIB)

    def nvmlDeviceGetNumaNodeId(self, handle):
        return self._device(handle)["numa"]

    def nvmlDeviceGetMigMode(self, handle):
        if self._device(handle).get("mig") is None:
            raise NvmlError("Not Supported")
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return len(self._device(handle)["mig"])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
        if self._device(handle)["mig"][slot] is None:
            raise NvmlError("Not Found")
        return ("mig", handle[1], slot)


TWO_GPUS = [
    {"uuid": "GPU-aaaa", "name": "NVIDIA A100-SXM4-40GB", "mib": 40960, "numa": 0,
     "mig": [("MIG-a1", 9856), None, ("MIG-a2", 19968)]},
    {"uuid": "GPU-bbbb", "name": "NVIDIA A100-SXM4-40GB", "mib": 40960, "numa": -1, "mig": None},
]


def test_nvml_physical_and_mig_devices():
    nvml = FakeNvml(TWO_GPUS)
    result = read_nvml(nvml)
    assert result.source == "nvml" and not result.error
    rows = [(g.id, g.kind, g.parent, g.memory_mib, g.numa, g.index) for g in result.gpus]
    assert rows == [
        ("GPU-aaaa", "physical", None, 40960, 0, 0),
        ("MIG-a1", "virtual", "GPU-aaaa", 9856, 0, 0),  # empty slot 1 skipped
        ("MIG-a2", "virtual", "GPU-aaaa", 19968, 0, 0),
        ("GPU-bbbb", "physical", None, 40960, None, 1),  # NVML numa -1 = unknown
    ]
    assert all(g.model == "NVIDIA A100-SXM4-40GB" for g in result.gpus)
    assert nvml.shutdowns == 1


def test_nvml_failing_mid_query_is_an_error_value_and_still_shuts_down():
    nvml = FakeNvml(TWO_GPUS, fail_on_count=True)
    result = read_nvml(nvml)
    assert result.gpus == [] and result.error and "GPU is lost" in result.reason
    assert nvml.shutdowns == 1


def test_real_pynvml_without_a_driver_is_a_normal_empty_answer():
    # on a machine without the NVIDIA driver: no GPUs, a reason, no exception
    result = read_nvml()
    if result.source == "nvml":
        pytest.skip("this machine has an NVIDIA driver; the no-driver path is not reachable here")
    assert result.gpus == [] and not result.error
    assert "NVML did not initialise" in result.reason or "not installed" in result.reason


def test_pynvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    result = read_nvml()
    assert result.gpus == [] and result.source == "none"
    assert "not installed" in result.reason


def write_inventory(tmp_path, entries) -> str:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(entries))
    return str(path)


INVENTORY = [
    {"id": "gpu0", "model": "T4", "memory_mib": 15360, "kind": "physical", "parent": None, "numa": 0},
    {"id": "gpu0-v1", "model": "T4", "memory_mib": 7680, "kind": "virtual", "parent": "gpu0", "numa": 0},
    {"id": "gpu1", "model": "T4", "memory_mib": 15360, "kind": "physical", "parent": None, "numa": 1},
]


def test_falls_back_to_inventory_file_when_nvml_does_not_initialise(tmp_path):
    path = write_inventory(tmp_path, INVENTORY)
    result = discover_gpus(path, nvml=FakeNvml([], init_error="Driver Not Loaded"))
    assert result.source == "file" and not result.error
    assert [(g.id, g.kind, g.parent, g.numa) for g in result.gpus] == [
        ("gpu0", "physical", None, 0), ("gpu0-v1", "virtual", "gpu0", 0), ("gpu1", "physical", None, 1)]
    assert "Driver Not Loaded" in result.reason  # why NVML was not used is kept


def test_nvml_wins_over_the_inventory_file(tmp_path):
    path = write_inventory(tmp_path, INVENTORY)
    result = discover_gpus(path, nvml=FakeNvml(TWO_GPUS))
    assert result.source == "nvml" and result.gpus[0].id == "GPU-aaaa"


def test_no_nvml_and_no_file_is_none(tmp_path):
    result = discover_gpus(None, nvml=FakeNvml([], init_error="NVML Shared Library Not Found"))
    assert (result.gpus, result.source, result.error) == ([], "none", False)
    missing = discover_gpus(tmp_path / "absent.json", nvml=FakeNvml([], init_error="no driver"))
    assert (missing.gpus, missing.source, missing.error) == ([], "none", False)
    assert "no inventory file" in missing.reason


BAD_FILES = [
    ("not json", "{", "unreadable"),
    ("not a list", json.dumps({"id": "g"}), "must hold a JSON list"),
    ("entry not object", json.dumps(["g"]), "entry 0 is not an object"),
    ("missing model", json.dumps([{"id": "g0"}]), "entry 0: model"),
    ("bad kind", json.dumps([{"id": "g0", "model": "T4", "kind": "shared"}]), "entry 0: kind"),
    ("negative memory", json.dumps([{"id": "g0", "model": "T4", "memory_mib": -1}]), "memory_mib"),
    ("duplicate ids", json.dumps([{"id": "g0", "model": "T4"}, {"id": "g0", "model": "T4"}]), "duplicate"),
    ("orphan virtual", json.dumps([{"id": "v", "model": "T4", "kind": "virtual", "parent": "gX"}]), "parent 'gX'"),
]


@pytest.mark.parametrize("what, content, message", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_inventory_file_is_an_error_value(tmp_path, what, content, message):
    path = tmp_path / "gpus.json"
    path.write_text(content)
    result = read_inventory_file(path)
    assert result.gpus == [] and result.error
    assert message in result.reason
