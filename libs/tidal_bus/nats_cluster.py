"""What a NATS client knows of the cluster it is connected to: which server
it is on, and how many copies a stream should have there."""

from __future__ import annotations

import logging
from typing import Any

from nats.aio.client import Client

from .errors import BusConfigError

log = logging.getLogger(__name__)


def server_in_use(nc: Client | None, fallback: str) -> str:
    """The server the client is connected to (of the seeds, or one the
    cluster advertised), by address and name: what logs must name."""
    if nc is None or nc.connected_url is None:
        return fallback
    address = f"{nc.connected_url.hostname}:{nc.connected_url.port}"
    name = (nc._server_info or {}).get("server_name")
    return f"{address} ({name})" if name else address


def checked_replicas(replicas: int | None) -> int | None:
    if replicas is not None and replicas < 1:
        raise BusConfigError(f"stream replicas must be at least 1, not {replicas}")
    return replicas


def stream_replicas(configured: int | None, server_info: dict[str, Any], server: str) -> int:
    """Copies of each stream: as configured, else 3 when the server is one
    of a cluster of 3 or more (by the client URLs it advertises), else 1."""
    if configured is not None:
        return configured
    if not server_info.get("cluster"):
        return 1
    servers = len(set(server_info.get("connect_urls") or ()))
    if servers < 3:
        log.warning("nats: server %s is clustered but advertises %d client URL(s) (no_advertise?): streams "
                    "get 1 replica; set TIDAL_BUS_REPLICAS", server, servers)
        return 1
    return 3
