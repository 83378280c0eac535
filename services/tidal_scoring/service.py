"""The scoring service: node load and peak per node (§E, §D) and fair-share
user scores (§C).

Node scores: `node.metrics` is consumed by the group, so replicas split the
nodes; each keeps a sample window per (cluster, node) and scores every
sample. The scores go out as one `score.node` event per partition for the
samples in hand (`tidal_runtime.output_batches`).

Fair share, ownership: every replica reads the whole `pod.lifecycle`
stream (a running pod is a slotted record, and its usage is kept summed
per user and resource type: `running.py`), but a (user, resource type) score
is computed and published only by the replica that owns that key's
partition of `score.user` in the group. The owner restores its keys from
their own published history (replayed when the partition is assigned), so
a failover continues the same series with one catch-up update. Updates
happen at clock-aligned boundaries (k·Δt), and the event id is derived
from (cluster, key, boundary), so during a hand-over two replicas publish
the same id for the same update and consumers keep one.
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timezone
from typing import Any

from prometheus_client import Gauge
from tidal_bus import Delivery
from tidal_clock import Clock, wall_clock
from tidal_schemas import (Envelope, NodeMetrics, NodeScore, NodeScores, PodLifecycle, Resources, UserScore,
                           derived_id)
from tidal_schemas.streams import partition_for, stream

from tidal_runtime import OutputBatches, Service, Subscription

from .fairshare import FairShareBook, adjust_time_from_settle_time, first_run_scores
from .load import load_from_metrics
from .peak import ESTIMATORS, SampleWindow, Weights, load_profile_weights, sample_from_metrics
from .running import RunningPods
from .settings import ScoringSettings

USER_SCORES = stream("score.user")


def next_boundary(now_s: float, period_s: float) -> float:
    """The first multiple of the period strictly after `now_s` (epoch seconds)."""
    return (math.floor(now_s / period_s) + 1) * period_s


class ScoringService(Service):
    name = "scoring"
    settings_class = ScoringSettings
    produces = ("score.node", "score.user")

    def __init__(self, settings: ScoringSettings | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self.settings: ScoringSettings
        s = self.settings
        self.windows: dict[str, SampleWindow] = {}
        self.weights = None if s.weight_cpu is None else Weights(cpu=s.weight_cpu, memory=1 - s.weight_cpu)
        self.adjust_time_s = adjust_time_from_settle_time(s.settle_time_s)
        self.books: dict[str, FairShareBook] = {}
        self.running = RunningPods()
        self.owned_score_partitions: frozenset[int] = frozenset()
        self.pods_caught_up = asyncio.Event()
        self.node_scores = OutputBatches(NodeScores, self.publish, linger_s=self.settings.output_linger_s,
                                          flush_at=self.settings.output_window)
        self.clock: Clock = wall_clock
        self.fair_share = Gauge("tidal_fair_share_score", "Fair-share score of a user for a resource type (lower: "
                                "placed first), as last published by this replica", ["cluster", "user", "resource_type"],
                                registry=self.metrics.registry)

    def subscriptions(self) -> list[Subscription]:
        return [
            Subscription("node.metrics", self.on_metrics, windowed=True, lingering=True),
            Subscription("score.user", self.on_user_score, on_assign=self.on_scores_assigned),
        ]

    def loops(self):
        return [self.follow_pods, self.tick_fair_share]

    # -- node scores ----------------------------------------------------------
    async def on_metrics(self, envelope: Envelope[NodeMetrics], delivery: Delivery) -> None:
        metrics = envelope.payload
        report = load_from_metrics(metrics)
        if report.load is None:
            self.log.info("node %s/%s: no NUMA or CPU figures in its metrics; no score", envelope.cluster, metrics.node)
            return
        window = self.windows.setdefault(envelope.cluster, SampleWindow(self.settings.peak_window_s))
        capacity = Resources(cpu_milli=len(metrics.cpu_util) * 1000, memory_mib=metrics.memory_total_mib)
        window.add(metrics.node, sample_from_metrics(metrics, capacity))
        samples = window.samples(metrics.node)
        estimate = ESTIMATORS[self.settings.peak_estimator](
            samples, self.settings.peak_window_s, capacity, self.weights or load_profile_weights(samples),
            min_samples=self.settings.peak_min_samples)
        if self.replaying(delivery, NodeScores.TYPE):
            return
        score = NodeScore(node=metrics.node, load=report.load, numa_load=report.numa_load, peak=estimate,
                          sampled_at=metrics.sampled_at, sample=envelope.id)
        await self.node_scores.add(score, key=metrics.node, cause=envelope)

    # -- fair share -----------------------------------------------------------
    def _owns(self, key: str) -> bool:
        return partition_for(key, USER_SCORES.partitions) in self.owned_score_partitions

    def _book(self, cluster: str) -> FairShareBook:
        return self.books.setdefault(cluster, FairShareBook(self.adjust_time_s))

    async def on_user_score(self, envelope: Envelope[UserScore], delivery: Delivery) -> None:
        """Our own published scores coming back: the durable record of each key."""
        score = envelope.payload
        book = self._book(envelope.cluster)
        current = book.get(score.user, score.resource_type)
        if current is None or score.updated_at > current.updated_at:
            book.restore_published(score)

    async def on_scores_assigned(self, gained: frozenset[int], lost: frozenset[int]) -> None:
        self.owned_score_partitions = (self.owned_score_partitions | gained) - lost
        for book in self.books.values():  # another replica owns these keys now
            book.forget(lambda user, kind: partition_for(f"{user}/{kind}", USER_SCORES.partitions) in lost)

    async def follow_pods(self) -> None:
        async def on_event(envelope: Envelope[Any]) -> None:
            if isinstance(envelope.payload, PodLifecycle) and self._handles(envelope.cluster):
                self.running.apply(envelope.cluster, envelope.payload)

        async def on_caught_up() -> None:
            self.pods_caught_up.set()

        # pending pods hold nothing: the broker leaves them out (StreamSpec.side_lane)
        await self.bus.catch_up_then_follow("pod.lifecycle", on_event, on_caught_up,
                                            linger_s=self.settings.input_linger_s, main_lane_only=True)

    def _handles(self, cluster: str) -> bool:
        clusters = self.settings.handled_clusters()
        return clusters is None or cluster in clusters

    async def tick_fair_share(self) -> None:
        await self.pods_caught_up.wait()
        scores_consumer = next(c for c in self.consumers if c.spec.name == "score.user")
        await scores_consumer.ready.wait()
        while True:
            boundary = next_boundary(self.clock(), self.settings.period_s)
            await asyncio.sleep(max(boundary - self.clock(), 0))
            await self.update_fair_share(datetime.fromtimestamp(boundary, timezone.utc))

    async def update_fair_share(self, at: datetime) -> list[UserScore]:
        """One periodic update of every owned key, published."""
        published = []
        for cluster in sorted(set(self.running.clusters()) | set(self.books)):
            book = self._book(cluster)
            usage = {k: v for k, v in self.running.usage(cluster).items() if self._owns(f"{k[0]}/{k[1]}")}
            # the first-run rule is for keys the book has never seen: only their users' pods are read
            new_users = {user for user, kind in usage if book.get(user, kind) is None}
            pods = [p for p in self.running.of_cluster(cluster) if p.user in new_users] if new_users else []
            first_run = {k: v for k, v in first_run_scores(pods, at, book.adjust_time_s).items()
                         if self._owns(f"{k[0]}/{k[1]}")}
            for score in book.advance(at, usage, first_run):
                event_id = derived_id(f"fairshare/{cluster}", UserScore.TYPE, score.event_key(), at.isoformat())
                await self.publish(score, event_id=event_id, cluster=cluster)
                self.fair_share.labels(cluster, score.user, score.resource_type).set(score.score)
                published.append(score)
        return published
