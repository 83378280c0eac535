"""The credential issuer: node agents' NATS credentials, issued at run time
from their Kubernetes ServiceAccount tokens (policy: tidal_bus.node_issuer).
Run with `python -m tidal_credentials`."""
