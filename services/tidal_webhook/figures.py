"""The newest oversold allocatable of every node, from `node.allocatable`.

Every replica keeps every node of its cluster (a few hundred bytes each):
any replica can answer for any node. A figure older than `max_age_s` is not
used: when oversell stops publishing, nodes stop being oversold as they
would with the webhook down.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tidal_schemas import Envelope, NodeAllocatables, Resources


class NewestAllocatable:
    """node -> (granted allocatable, when it was published), newest wins."""

    def __init__(self, cluster: str, max_age_s: float) -> None:
        self.cluster = cluster
        self.max_age = timedelta(seconds=max_age_s)
        self.held: dict[str, tuple[Resources, datetime]] = {}

    def take(self, envelope: Envelope[NodeAllocatables]) -> int:
        """Keep each node's figure in `envelope` unless a newer one is held; how many were kept."""
        if envelope.cluster != self.cluster or not isinstance(envelope.payload, NodeAllocatables):
            return 0
        kept = 0
        for item in envelope.payload.items:
            held = self.held.get(item.node)
            if held is None or held[1] <= envelope.time:
                self.held[item.node] = (item.allocatable, envelope.time)
                kept += 1
        return kept

    def lookup(self, node: str, now: datetime) -> tuple[Resources | None, str]:
        """(the figure to write, '') or (None, why there is none)."""
        held = self.held.get(node)
        if held is None:
            return None, f"no oversold allocatable known for node {node}"
        granted, at = held
        if now - at > self.max_age:
            return None, (f"the oversold allocatable of node {node} is from {at.isoformat()}, older than "
                          f"{self.max_age.total_seconds():g}s")
        return granted, ""
