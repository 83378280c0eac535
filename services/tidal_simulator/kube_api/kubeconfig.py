"""The kubeconfig a simulated cluster writes into its data dir: the bridge
and kubectl reach the simulated API server through it, as they would a real
cluster's."""

from __future__ import annotations

from pathlib import Path

import yaml


def kubeconfig(server: str, cluster: str = "tidal-simulator") -> dict:
    """A kubeconfig document with one cluster, user and context (no credentials:
    the simulated API server listens on localhost only)."""
    return {"apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": cluster, "cluster": {"server": server}}],
            "users": [{"name": "simulator", "user": {}}],
            "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": "simulator"}}],
            "current-context": cluster}


def write_kubeconfig(path: str | Path, server: str, cluster: str = "tidal-simulator") -> Path:
    """Write the kubeconfig for `server` to `path` (its folder created); the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server, cluster), sort_keys=False))
    return path
