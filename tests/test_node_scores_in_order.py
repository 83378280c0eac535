"""Placement takes a node's loads, and oversell its peak, from the node's
newest sample: a score of an older sample read after a newer one (two
scoring replicas at a partition's hand-over can publish so) leaves the
newer figures in place."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tidal_bus import Delivery
from tidal_cli.sample import node
from tidal_oversell import OversellService, OversellSettings
from tidal_placement.cache import ClusterCache
from tidal_schemas import NodeScore, NodeScores, PeakEstimate, decode, encode, make_envelope

T0 = datetime(2026, 11, 26, tzinfo=timezone.utc)


def _score(load: float, at: datetime) -> NodeScores:
    return NodeScores.of(NodeScore(node="n1", load=load, numa_load={0: load, 1: load}, sampled_at=at))


def _loads(cache: ClusterCache) -> tuple[float, list[float]]:
    r = cache.state.rows["n1"]
    return float(cache.state.node_load[r]), [float(x) for x in cache.state.numa_load[r, :2]]


def test_an_older_sample_read_late_leaves_the_newer_loads():
    cache = ClusterCache("c1", permit_timeout_s=30.0, stale_after_s=0.0)
    cache.apply(node("n1", 1, 2, 4, 1, 64 * 1024, reserved=0), 0.0)
    cache.apply(_score(0.2, T0), 0.0)
    cache.apply(_score(0.7, T0 + timedelta(seconds=10)), 0.0)
    cache.apply(_score(0.2, T0), 0.0)  # the older one again, late
    assert _loads(cache) == (0.7, [0.7, 0.7])
    assert cache.last_sample["n1"] == T0 + timedelta(seconds=10)
    cache.apply(_score(0.4, T0 + timedelta(seconds=20)), 0.0)
    assert _loads(cache) == (0.4, [0.4, 0.4])


async def test_oversell_keeps_the_peak_of_the_newest_sample():
    service = OversellService(OversellSettings(bus_url="nats://127.0.0.1:4222", namespace="t", cluster="c1"))
    delivery = Delivery("score.node", 0, 0, 1, replaying=False)

    def scored(utilisation: float, at: datetime):
        peak = PeakEstimate(estimator="weighted", window_s=600, samples=5, utilisation=utilisation)
        score = NodeScore(node="n1", load=0.5, numa_load={0: 0.5}, peak=peak, sampled_at=at)
        return decode(encode(make_envelope(NodeScores.of(score), source="scoring", cluster="c1")))
    await service.on_score(scored(0.3, T0 + timedelta(seconds=10)), delivery)
    await service.on_score(scored(0.9, T0), delivery)  # older, late
    assert service.views[("c1", "n1")].peak.utilisation == 0.3
    await service.on_score(scored(0.6, T0 + timedelta(seconds=20)), delivery)
    assert service.views[("c1", "n1")].peak.utilisation == 0.6
