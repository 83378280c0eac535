"""A Kubernetes API server for the simulated cluster (and the bridge's tests):
see `server.py`."""

from .admission import AdmissionRefused, ApiError
from .kubeconfig import write_kubeconfig
from .objects import node_object, pod_object
from .server import KubeApiServer

__all__ = ["AdmissionRefused", "ApiError", "KubeApiServer", "node_object", "pod_object", "write_kubeconfig"]
