"""The auditor (`tidal audit`): the §F guarantees, checked over a cluster's
streams. `registry.audit` is the pure entry; `streams.py` reads a bus;
`node_side.py` checks what the kubelets did (a simulated run's records)
against the decisions."""

from tidal_runtime.exports import lazy_exports

# The public entry points (tools on top import these, never the modules).
PUBLIC = {
    "audit": "registry:audit",
    "read_streams": "streams:read_streams",
    "at_the_node": "node_side:at_the_node",
    "ContainerDevices": "node_side:ContainerDevices",
    "AdmissionFailure": "node_side:AdmissionFailure",
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
