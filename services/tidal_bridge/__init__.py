"""The Kubernetes bridge: Tidal's only client of the Kubernetes API.

It turns pods (scheduled by Tidal) into `pod.lifecycle` events, binds pods
where `placement.decision` says, writes oversold allocatable onto nodes,
and carries out taint / untaint / evict actions. Parsing and request bodies
are pure (`annotations`, `pods`, `nodes`, `objects`); `kube`, `watch`,
`binder`, `actuator` talk to the API server; `service` wires them to the bus.
"""

from tidal_runtime.exports import lazy_exports

# The public entry points (tools on top import these, never the modules).
PUBLIC = {
    "BridgeService": "service:BridgeService",
    "BridgeSettings": "settings:BridgeSettings",
    "pod_lifecycle": "pods:pod_lifecycle",  # a Pod object as the bridge publishes it
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
