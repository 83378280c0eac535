"""A node agent that stops publishing: after `node_stale_after_s` without a
usage sample its node takes no new pods (filtered with the reason "stale: no
metrics for 30s"), and it takes them again as soon as it samples again.

The rule (`tidal_placement.staleness`) is pure and table-tested here; the
service test runs placement over a real NATS server with its clock injected,
so "30 s without a sample" is a fact of the events and that clock, not of
how long the test waits.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from builders import T0, pod
from conftest import make_bus, start_service, stop_service, wait_until
from tidal_bus import StartAt
from tidal_cli.sample import node
from tidal_placement.cluster_state import ClusterState
from tidal_placement.decide import PodRequest, decide
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_placement.staleness import stale_nodes, stale_reason
from tidal_simulator.topology_builder import make_topology
from tidal_schemas import NodeScore, NodeScores

REASON = "stale: no metrics for 30s"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize("last, now_s, expected", [
    ({"a": 0, "b": 25}, 30, set()),            # 30 - 0 = 30 is not more than 30
    ({"a": 0, "b": 25}, 31, {"a"}),            # 31 s since a's sample; b's is 6 s old
    ({"a": 0, "b": 0, "c": 40}, 45, {"a", "b"}),
    ({"a": 0, "b": 10}, 100, set()),           # everyone silent: the pipeline's silence, nobody is stale
    ({"a": 0}, 100, set()),                    # a cluster of one node never has a stale node
    ({}, 100, set()),
    ({"a": 50, "b": 0}, 45, {"b"}),            # a sample from the future (agent clock ahead) is fresh
])
def test_stale_nodes(last, now_s, expected):
    assert stale_nodes({n: at(s) for n, s in last.items()}, at(now_s), 30.0) == expected


def test_zero_means_never_stale():
    assert stale_nodes({"a": at(0), "b": at(1000)}, at(1000), 0.0) == frozenset()


def test_a_stale_node_is_filtered_under_its_reason():
    state = ClusterState()
    for name in ("stale", "tainted", "full", "ok"):
        state.upsert_node(make_topology(name, (4,)))
    state.set_blocked("stale", stale_reason(30.0))
    state.set_blocked("tainted", "stop-scheduling taint")
    state.set_blocked("full", stale_reason(30.0))
    state.set_blocked("full", "stop-scheduling taint")  # two reasons: counted under the first by name
    choice = decide(state, PodRequest("p", cpu_milli=1000))
    assert choice.ok and choice.node == "ok"
    assert choice.filtered == {REASON: 2, "stop-scheduling taint": 1}
    assert state.blocked("full") == {REASON, "stop-scheduling taint"}
    state.set_blocked("stale", REASON, blocked=False)
    assert not state.blocked("stale") and state.schedulable[state.rows["stale"]]


class Clock:
    """The service's "now", set by the test."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now.timestamp()


def score(name: str, sampled_s: float) -> NodeScores:
    return NodeScores.of(NodeScore(node=name, load=0.1, numa_load={0: 0.1, 1: 0.1}, sampled_at=at(sampled_s)))


async def last_decision(bus, name: str):
    found = [d async for _, e in bus.read("placement.decision", StartAt.earliest()) for d in e.payload.items
             if d.name == name]
    return found[-1] if found else None


async def test_a_node_that_stops_publishing_goes_stale_and_comes_back(nats_server, namespace):
    settings = PlacementSettings(bus_url=nats_server.url, namespace=namespace, cluster="c1", http_port=0,
                                 http_host="127.0.0.1", gpu_strategy="best-fit", node_stale_after_s=30,
                                 node_stale_check_s=0.05, takeover_settle_s=0.5)
    service = PlacementService(settings)
    clock = Clock(at(0))
    service.clock = clock
    task = await start_service(service)
    held = lambda key: service.clusters["c1"].state.held(key)  # noqa: E731
    async with make_bus(nats_server.url, namespace) as bus:
        for name in ("n1", "n2"):  # 2 NUMA x 4 CPUs, 8000 m each
            await bus.publish(node(name, 1, 2, 4, 1, 64 * 1024, reserved=0))
            await bus.publish(score(name, 0))
        clock.now = at(10)
        await bus.publish(pod("early", cpu_milli=1000))
        await wait_until(lambda: held("default/early") is not None, timeout=20, what="a first placement")

        # t = 45 s: n2 sampled at 40 s, n1 not since 0 s → n1 is stale
        clock.now = at(45)
        await bus.publish(score("n2", 40))
        await wait_until(lambda: service.clusters["c1"].stale == {"n1"}, timeout=20, what="n1 marked stale")
        assert service.clusters["c1"].state.blocked("n1") == {REASON} and not service.clusters["c1"].state.blocked("n2")
        await bus.publish(pod("after", cpu_milli=2000))
        await wait_until(lambda: held("default/after") is not None, timeout=20, what="a placement while n1 is stale")
        assert held("default/after").node == "n2", "a stale node takes no new pods"
        # 6500 m fits only an empty-enough n1: pending, with n1 counted out as stale
        await bus.publish(pod("huge", cpu_milli=6500))
        await wait_until(lambda: "default/huge" in service.clusters["c1"].queue.entries
                         and service.clusters["c1"].queue.entries["default/huge"].reason, timeout=20, what="huge pending")
        pending = await last_decision(bus, "huge")
        assert pending.outcome == "pending" and pending.filtered == {REASON: 1, "cpu": 1}, pending
        assert REASON in pending.reason

        # n1's agent publishes again: n1 is back at once, and the waiting pod goes there
        # (once its back-off, 1 s after its first try, is over)
        clock.now = at(46)
        await bus.publish(score("n1", 44))
        await wait_until(lambda: held("default/huge") is not None, timeout=20, what="huge placed once n1 is back")
        assert held("default/huge").node == "n1"
        assert not service.clusters["c1"].stale and not service.clusters["c1"].state.blocked("n1")

        # n1 silent again while n2 samples: stale again; then everybody silent
        # (scoring down, say): nobody is taken out, placement goes on
        clock.now = at(80)
        await bus.publish(score("n2", 75))
        await wait_until(lambda: service.clusters["c1"].stale == {"n1"}, timeout=20, what="n1 stale again")
        clock.now = at(500)
        await wait_until(lambda: service.clusters["c1"].stale == frozenset(), timeout=20, what="nobody stale")
        assert not service.clusters["c1"].state.blocked("n1")
        await bus.publish(pod("later", cpu_milli=500))
        await wait_until(lambda: held("default/later") is not None, timeout=20, what="placement goes on")
    await stop_service(service, task)


def test_the_threshold_is_a_setting(monkeypatch):
    monkeypatch.setenv("TIDAL_PLACEMENT_NODE_STALE_AFTER_S", "45")
    assert PlacementSettings().node_stale_after_s == 45.0
    monkeypatch.setenv("TIDAL_PLACEMENT_NODE_STALE_AFTER_S", "-1")
    with pytest.raises(ValueError, match="node_stale_after_s"):
        PlacementSettings()


def test_reason_names_the_threshold():
    assert stale_reason(30.0) == REASON and stale_reason(7.5) == "stale: no metrics for 7.5s"


def test_a_stale_node_sampling_again_is_put_back_alone_without_a_pass_over_every_node(monkeypatch):
    from tidal_placement.cache import ClusterCache

    cache = ClusterCache("c1", permit_timeout_s=30, stale_after_s=30)
    for name in ("a", "b", "c"):
        cache.state.upsert_node(make_topology(name, (4,)))
    for name, sampled in (("a", 0), ("b", 0), ("c", 40)):
        cache.apply(score(name, sampled), at(40).timestamp())
    assert cache.check_stale(at(45).timestamp()) == (["a", "b"], [])
    passes = []
    real = stale_nodes
    monkeypatch.setattr("tidal_placement.freshness.stale_nodes", lambda *args: passes.append(args) or real(*args))
    cache.room_changed = False
    # b's sample from 10 s is read late, at 45 s: still too old, b stays out
    assert not cache.apply(score("b", 10), at(45).timestamp())
    # a samples again: a alone is back, at once
    assert cache.apply(score("a", 44), at(45).timestamp()) and cache.room_changed
    assert cache.stale == {"b"} and not cache.state.blocked("a") and cache.state.blocked("b") == {REASON}
    assert passes == []  # 5,000 nodes sample 500 times a second: no sample may cost a pass over all of them
    assert cache.check_stale(at(46).timestamp()) == ([], []) and len(passes) == 1
