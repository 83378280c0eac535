"""The committed device plugin API modules are what `tidal_kubelet_api.generate`
makes of the .proto now: an edit of the .proto without regenerating, or a
hand edit of a generated module, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

import tidal_kubelet_api
from tidal_kubelet_api import generate

COMMITTED = Path(tidal_kubelet_api.__file__).resolve().parent
MODULES = ("deviceplugin_v1beta1_pb2.py", "deviceplugin_v1beta1_pb2_grpc.py")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kubelet_api")
    generate.generate(out)
    return out


@pytest.mark.parametrize("module", MODULES)
def test_the_committed_module_is_what_the_proto_generates(regenerated, module):
    assert (regenerated / module).read_text() == (COMMITTED / module).read_text(), (
        f"{module} differs from what {generate.PROTO} generates: run `python -m tidal_kubelet_api.generate`")


def test_the_generated_modules_speak_the_kubelets_api():
    # the wire names the kubelet calls: package v1beta1, its two services
    from tidal_kubelet_api import pb2, pb2_grpc

    assert pb2.DESCRIPTOR.package == "v1beta1"
    assert set(pb2.DESCRIPTOR.services_by_name) == {"Registration", "DevicePlugin"}
    assert [m.name for m in pb2.DESCRIPTOR.services_by_name["DevicePlugin"].methods] == [
        "GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate", "PreStartContainer"]
    assert hasattr(pb2_grpc, "RegistrationStub") and hasattr(pb2_grpc, "DevicePluginServicer")
