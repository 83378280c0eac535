"""Tidal's mutating admission webhook: writes each node's oversold CPU and
memory (oversell's `node.allocatable`) into the status its kubelet updates,
clamped between the kubelet's own figure and the policy's cap. The pure
patch is `patch.py`; the review format `review.py`; the wiring `service.py`."""

from tidal_runtime.exports import lazy_exports

# The public entry points (tools on top import these, never the modules).
PUBLIC = {
    "WebhookService": "service:WebhookService",
    "WebhookSettings": "settings:WebhookSettings",
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
