"""The kubelet's device plugin API (v1beta1) as generated Python gRPC modules:
`pb2` holds the messages, `pb2_grpc` the service stubs and servicers, and
the constants below are the kubelet's own names for the API's fixed values."""

from tidal_kubelet_api import deviceplugin_v1beta1_pb2 as pb2
from tidal_kubelet_api import deviceplugin_v1beta1_pb2_grpc as pb2_grpc

VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"  # the Registration service, in the plugin dir
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"

__all__ = ["pb2", "pb2_grpc", "VERSION", "HEALTHY", "UNHEALTHY", "KUBELET_SOCKET", "DEVICE_PLUGIN_DIR"]
