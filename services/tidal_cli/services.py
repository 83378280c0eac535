"""The services `tidal run` and `tidal up` know, by name (explicit registry).

Values are import paths so that `tidal --help` does not import every service.
"""

from __future__ import annotations

import importlib

SERVICES: dict[str, str] = {
    "topology": "tidal_topology.service:TopologyService",
    "scoring": "tidal_scoring.service:ScoringService",
    "placement": "tidal_placement.service:PlacementService",
    "oversell": "tidal_oversell.service:OversellService",
    "remediation": "tidal_remediation.service:RemediationService",
    "bridge": "tidal_bridge.service:BridgeService",
    "simulator": "tidal_simulator.service:SimulatorService",
    "webhook": "tidal_webhook.service:WebhookService",
}


# Started only when asked for: the bridge talks to a Kubernetes API server, the
# simulator stands in for a cluster (`tidal simulate` runs it), and an API server
# calls the webhook (`tidal simulate --services …,webhook` registers it with the stand-in).
NEEDS_A_CLUSTER = {"bridge", "simulator", "webhook"}


def default_services() -> list[str]:
    """What `tidal up` and `tidal demo` start when not told otherwise."""
    return [name for name in available() if name not in NEEDS_A_CLUSTER]


def available() -> dict[str, str]:
    """Registered services whose package is importable, in pipeline order."""
    found = {}
    for name, target in SERVICES.items():
        module = target.split(":")[0]
        if importlib.util.find_spec(module.split(".")[0]) is not None:
            found[name] = target
    return found


def load(name: str):
    """The Service class registered under `name`."""
    try:
        target = SERVICES[name]
    except KeyError:
        known = ", ".join(SERVICES) or "none yet"
        raise KeyError(f"unknown service {name!r}; known: {known}") from None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)
