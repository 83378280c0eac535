"""What the scoring service publishes: fair-share and node load/peak."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, Field

from .common import Fraction, Name, NonNegInt, NumaId, Record
from .envelope import Payload, register
from .node_batch import NodeBatch

PeakEstimator = Literal["weighted", "percentile", "statistical"]


@register
class UserScore(Payload):
    """Exponentially decayed usage of one user for one resource type (§C).
    Lower score = higher priority."""

    TYPE = "score.user"

    user: Name
    resource_type: Name
    score: float = Field(ge=0)
    usage: float = Field(ge=0)
    updated_at: AwareDatetime
    adjust_time_s: float = Field(gt=0)

    def event_key(self) -> str:
        return f"{self.user}/{self.resource_type}"


class PeakEstimate(Record):
    """A node's estimated peak utilisation (§D). When there were too few
    samples, `utilisation` is None and `reason` says so: consumers then fall
    back to requests, never to a made-up number."""

    estimator: PeakEstimator
    window_s: float = Field(gt=0)
    samples: NonNegInt
    utilisation: Fraction | None = None
    cpu_milli: NonNegInt | None = None
    memory_mib: NonNegInt | None = None
    reason: str = ""


class NodeScore(Record):
    """One node's load (mean of NUMA loads), NUMA breakdown and peak usage,
    from one sample (`sample`: that `node.metrics` event's id, when scoring
    answered one)."""

    node: Name
    load: Fraction
    numa_load: dict[NumaId, Fraction] = Field(default_factory=dict)
    peak: PeakEstimate | None = None
    sampled_at: AwareDatetime
    sample: str | None = Field(default=None, max_length=128)

    def older_than(self, newest: datetime | None) -> bool:
        """Whether this score's sample is older than `newest`, the newest
        one taken in: a score read late (two scoring replicas at a
        partition's hand-over can publish so) leaves the newer figures."""
        return newest is not None and self.sampled_at < newest


@register
class NodeScores(NodeBatch[NodeScore]):
    """Node scores of one partition, one per sample scoring had in hand (`node_batch`)."""

    TYPE = "score.node"
    VERSION = 2
