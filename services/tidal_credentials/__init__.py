"""The credential issuer: node agents' NATS credentials, issued at run time
from their Kubernetes ServiceAccount tokens (policy: tidal_bus.node_issuer).
Run with `python -m tidal_credentials`."""

from tidal_runtime.exports import lazy_exports

# The public entry points (tools on top import these, never the modules).
PUBLIC = {
    "CredentialIssuer": "service:CredentialIssuer",
    "CredentialsSettings": "settings:CredentialsSettings",
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
