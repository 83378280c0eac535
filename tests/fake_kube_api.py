"""The bridge tests' API server is the simulator's own (one implementation,
`tidal_simulator.kube_api`); this name stays for the tests that import it."""

from tidal_simulator.kube_api import KubeApiServer as FakeKubeApi
from tidal_simulator.kube_api.protocol import merge_patch, parse_selector

__all__ = ["FakeKubeApi", "merge_patch", "parse_selector"]
