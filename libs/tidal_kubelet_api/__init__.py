"""The kubelet's device plugin API (v1beta1) as generated Python gRPC modules:
`pb2` holds the messages, `pb2_grpc` the service stubs and servicers, and
the constants below are the kubelet's own names for the API's fixed values."""

import os

# A process serving gRPC (a node agent's device plugin, the simulator's
# kubelets) may fork a child that execs at once and never uses gRPC (the
# CLI's stack starts services with a preexec_fn). gRPC's fork handlers crash
# such a child about one fork in six while gRPC's threads are busy
# ('service bridge exited with -11'); they are not wanted. grpc reads this
# when first imported, so our modules take grpc from here (`from
# tidal_kubelet_api import grpc`), never import it first themselves.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import grpc  # noqa: E402

from tidal_kubelet_api import deviceplugin_v1beta1_pb2 as pb2  # noqa: E402
from tidal_kubelet_api import deviceplugin_v1beta1_pb2_grpc as pb2_grpc  # noqa: E402

VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"  # the Registration service, in the plugin dir
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"

__all__ = ["grpc", "pb2", "pb2_grpc", "VERSION", "HEALTHY", "UNHEALTHY", "KUBELET_SOCKET", "DEVICE_PLUGIN_DIR"]
