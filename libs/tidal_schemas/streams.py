"""The stream catalogue: one stream per event type, who writes and reads it.

Both bus backends derive their layout from this table (NATS stream and
subjects, Kafka topic and partitions), so the two stay interchangeable.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

DAY = 86_400.0


@dataclass(frozen=True)
class StreamSpec:
    """Layout and retention of one stream."""

    name: str
    partitions: int = 8
    max_age_s: float = 7 * DAY
    max_bytes: int | None = None  # None: bounded by age only (NATS reserves storage for a byte cap)
    keep_last_per_key: bool = False
    """A state stream: the last event of every (cluster, key) is kept for as
    long as it is not replaced, whatever its age (NATS: one message per
    subject, no age limit; Kafka: a compacted topic). `max_age_s` is ignored."""
    producers: tuple[str, ...] = ()
    consumers: tuple[str, ...] = ()
    written_by_nodes: bool = False
    """Node agents publish here, each trusted only for its own node's key.
    The broker's duplicate window is one id space per stream, and a producer
    sets its message id as it likes, so any agent could fill it with ids of
    other nodes' events: such a stream does not use it. Consumers drop
    duplicates by id under the verified key (tidal_bus.intake.dedupe_key)."""
    side_lane: str | None = None
    """The name of a lane of events (`Payload.in_side_lane`) a reader may
    leave out, and the broker then never sends it (NATS: a sixth subject
    token, Kafka: a record header). Pending pods: every pod arrives pending,
    and only placement acts on that; fair share, oversell and the node
    agents follow only the pods that hold something, and a burst of
    arrivals costs them nothing. The last event per subject would not be
    the last per key, so a state stream has none."""

    def __post_init__(self) -> None:
        if self.side_lane is not None and self.keep_last_per_key:
            raise ValueError(f"stream {self.name}: a state stream (keep_last_per_key) cannot have a side lane")

    def subject_pattern(self, namespace: str = "tidal") -> str:
        return f"{namespace}.{self.token}.{{cluster}}.{{partition}}.{{key}}"

    @property
    def token(self) -> str:
        """The stream name as one NATS subject token."""
        return self.name.replace(".", "_")


def partition_for(key: str, partitions: int) -> int:
    """Which partition a key lives in. The same function on every backend
    and every replica, so a key's events always land together."""
    return zlib.crc32(key.encode()) % partitions


_CATALOGUE = [
    StreamSpec("node.topology", producers=("topology", "simulator"), written_by_nodes=True,
               consumers=("scoring", "placement", "oversell", "remediation")),
    StreamSpec("node.metrics", max_age_s=1 * DAY, producers=("topology", "simulator"), written_by_nodes=True,
               consumers=("scoring", "oversell", "remediation")),
    StreamSpec("pod.lifecycle", producers=("bridge", "simulator"), side_lane="pending",
               consumers=("scoring", "placement", "oversell", "remediation")),
    # The last configuration of every tenant lives as long as the tenant: an
    # unchanged tenant must not age out (deleting one is an explicit event).
    StreamSpec("tenant.config", partitions=1, keep_last_per_key=True, producers=("cli", "bridge"),
               consumers=("placement",)),
    # What each tenant holds: the bridge shows it on the Tenant objects.
    StreamSpec("tenant.usage", keep_last_per_key=True, producers=("placement",), consumers=("bridge",)),
    StreamSpec("score.user", producers=("scoring",), consumers=("placement", "bridge")),
    StreamSpec("score.node", producers=("scoring",), consumers=("placement", "oversell")),
    # One partition: the decision log is totally ordered, so every reader
    # agrees on which leader's decisions count (see tidal_schemas.fence).
    StreamSpec("placement.decision", partitions=1, producers=("placement",),
               consumers=("bridge", "simulator", "topology")),
    # What each stage replica read and did, in order: what an exact replay re-runs (journal.py).
    StreamSpec("stage.journal", producers=("placement", "oversell", "remediation"), consumers=("cli",)),
    StreamSpec("bind.result", producers=("bridge", "simulator"), consumers=("placement", "topology")),
    StreamSpec("node.allocatable", producers=("oversell",),
               consumers=("placement", "simulator", "webhook")),
    # What each Node object's status says the kubelet admits against: placement
    # books no more (docs/last-mile.md). A node's last lives as long as the
    # node, however long its figure stays the same.
    StreamSpec("node.status", keep_last_per_key=True, producers=("bridge",), consumers=("placement",)),
    StreamSpec("node.action", producers=("oversell", "remediation"),
               consumers=("topology", "bridge", "simulator")),
    StreamSpec("action.result", producers=("topology", "bridge", "simulator"), written_by_nodes=True,
               consumers=("oversell", "remediation")),
    StreamSpec("cpu.assignment", producers=("topology",), consumers=("placement", "remediation"),
               written_by_nodes=True),
    StreamSpec("dead.letter", partitions=1, max_age_s=30 * DAY, max_bytes=256 << 20, producers=("every service",)),
]

STREAMS: dict[str, StreamSpec] = {spec.name: spec for spec in _CATALOGUE}


def stream(name: str) -> StreamSpec:
    """The spec of stream `name`; KeyError with the known names otherwise."""
    try:
        return STREAMS[name]
    except KeyError:
        raise KeyError(f"unknown stream {name!r}; known: {', '.join(sorted(STREAMS))}") from None


def lane_of(payload) -> str | None:
    """The lane an event of `payload` travels in: its stream's side lane
    (`StreamSpec.side_lane`), or None, the main lane."""
    return STREAMS[payload.TYPE].side_lane if payload.in_side_lane() else None
