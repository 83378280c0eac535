"""Tidal oversell: oversell factor (SPEC §D, seed 003), bounded allocatable
(seed 004), stop-scheduling taints and eviction choice. This package holds
the pure policy; the service wiring decodes events, calls these functions and
publishes `node.allocatable` and `node.action`."""

from tidal_runtime.exports import lazy_exports

# The public entry points (tools on top import these, never the modules).
PUBLIC = {
    "OversellService": "service:OversellService",
    "OversellSettings": "settings:OversellSettings",
    "PodsByNode": "pods_by_node:PodsByNode",  # what oversell keeps of the pods holding room on each node
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
