"""What the scoring service publishes: fair-share and node load/peak."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from .common import Fraction, Name, NonNegInt, NumaId, Record
from .envelope import Payload, register
from .streams import partition_for, stream

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
    updated_at: datetime
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
    sampled_at: datetime
    sample: str | None = Field(default=None, max_length=128)

    def older_than(self, newest: datetime | None) -> bool:
        """Whether this score's sample is older than `newest`, the newest
        one taken in: a score read late (two scoring replicas at a
        partition's hand-over can publish so) leaves the newer figures."""
        return newest is not None and self.sampled_at < newest


MAX_SCORES = 256  # per event: about 300 bytes each, far under the broker's message limit


@register
class NodeScores(Payload):
    """Node scores of one stream partition, in sample order: scoring
    answers the samples it has in hand with one event, not one each (every
    event costs its producer, the broker and each reader far more than its
    few hundred bytes). Keyed by the first node; every node belongs to the
    key's partition, so a reader owning that partition owns them all.
    Version 1 carried one score as the payload itself; such an event reads
    as a batch of one."""

    TYPE = "score.node"
    VERSION = 2

    scores: list[NodeScore] = Field(min_length=1, max_length=MAX_SCORES)

    @model_validator(mode="before")
    @classmethod
    def _one_score(cls, data: Any) -> Any:
        if isinstance(data, dict) and "scores" not in data and "node" in data:
            return {"scores": [data]}  # version 1: the score itself
        return data

    @model_validator(mode="after")
    def _one_partition(self) -> "NodeScores":
        partitions = stream(self.TYPE).partitions
        home = partition_for(self.scores[0].node, partitions)
        strays = [s.node for s in self.scores if partition_for(s.node, partitions) != home]
        if strays:
            raise ValueError(f"nodes of another partition than {self.scores[0].node!r}'s: {strays[:3]}")
        return self

    @classmethod
    def of(cls, *scores: NodeScore) -> "NodeScores":
        return cls(scores=list(scores))

    def event_key(self) -> str:
        return self.scores[0].node
