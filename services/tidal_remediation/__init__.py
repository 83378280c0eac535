"""Tidal remediation: NUMA hotspot relief (SPEC §E, seed 004). This package
holds the pure policy — hotspot detection, the round planner, the memory of
what was frozen or moved, the retry policy and the conversion to
`node.action` events; the service wiring decodes `node.metrics` and
`action.result`, calls these functions and publishes the actions."""

from tidal_runtime.exports import lazy_exports

# The public entry points (tools on top import these, never the modules).
PUBLIC = {
    "RemediationService": "service:RemediationService",
    "RemediationSettings": "settings:RemediationSettings",
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
