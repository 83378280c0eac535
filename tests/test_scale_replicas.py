"""Horizontal scale of a per-node stage, at the service level: replicas of
the scoring service in one group split the node keys, every key is handled
by exactly one replica, and when a replica goes away its keys move to the
survivors with their state (replayed from history) and nothing published
afterwards is lost. One contract, run over real NATS and real Kafka.

The bus-level group tests (tests/test_bus_contract.py) use bare consumers;
here the real service runs, with its own handler, outputs and replay.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone

import pytest

from builders import metrics, figures_in
from conftest import make_bus, patience, start_service, stop_service, wait_until
from tidal_bus import StartAt
from tidal_bus.membership import assignment
from tidal_schemas.streams import partition_for, stream
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings

PARTITIONS = stream("node.metrics").partitions
NODES = [f"node-{i:02d}" for i in range(48)]


def balanced_members(count: int) -> list[str]:
    """Process ids whose split gives every member at least two of the
    stream's partitions (bounded-load rendezvous always does for three
    members and eight partitions; the check keeps the test honest if the
    partition count changes)."""
    for n in range(1000):
        ids = [f"replica{chr(97 + i)}{n}" for i in range(count)]
        if all(len(assignment(m, ids, PARTITIONS)) >= 2 for m in ids):
            return ids
    raise AssertionError("no balanced member ids")  # pragma: no cover


class RecordingScoring(ScoringService):
    """The real scoring service; remembers which node keys it was given."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.live: list[tuple[str, float]] = []  # (node, cpu load) handled live
        self.replayed: set[str] = set()  # nodes whose history was replayed on a hand-over

    async def on_metrics(self, envelope, delivery) -> None:
        if delivery.replaying:
            self.replayed.add(envelope.payload.node)
        else:
            self.live.append((envelope.payload.node, envelope.payload.node_cpu_util))
        await super().on_metrics(envelope, delivery)

    def owned(self) -> frozenset[int]:
        consumer = next((c for c in self.consumers if c.spec.name == "node.metrics"), None)
        return consumer.subscription.owned() if consumer and consumer.subscription else frozenset()


def _sample(node: str, load: float, at: datetime):
    return metrics(node, load=load, sampled_at=at, cpu_util={0: load, 1: load}, memory_total_mib=4096,
                   memory_used_mib=1024)


def _split(replicas: list[RecordingScoring]) -> bool:
    """Each replica owns some partitions, none twice, all of them together."""
    owned = [r.owned() for r in replicas]
    return all(owned) and sum(map(len, owned)) == PARTITIONS and len(frozenset().union(*owned)) == PARTITIONS


def _handlers(replicas: list[RecordingScoring], load: float) -> dict[str, list[int]]:
    """node -> indexes of the replicas that handled its sample of `load` live."""
    found: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(replicas):
        for node, seen_load in r.live:
            if seen_load == load:
                found[node].append(i)
    return found


async def scores_stored(bus_url: str, namespace: str, samples, timeout: float = 15.0) -> None:
    """Wait until every one of `samples` has its score on `score.node`."""
    wanted = {e.id for e in samples}
    deadline = asyncio.get_running_loop().time() + patience(timeout)
    async with make_bus(bus_url, namespace, source="reader") as reader:
        while True:
            scores = [e async for _, e in reader.read("score.node", StartAt.earliest())]
            missing = wanted - {score.sample for score in figures_in(scores)}
            if not missing:
                return
            assert asyncio.get_running_loop().time() < deadline, f"{len(missing)} samples without a stored score"
            await asyncio.sleep(0.1)


def _handled_on_metrics(replica: RecordingScoring) -> Counter:
    """partition -> node.metrics events handled, from the registry its /metrics serves."""
    found = Counter()
    for family in replica.metrics.handled_by_partition.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels["stream"] == "node.metrics":
                found[int(sample.labels["partition"])] = int(sample.value)
    return found


class ScaleContract:
    """Subclasses give `bus_url` and how a replica is taken away (`remove`)."""

    REPLICAS = 3

    async def remove(self, replica: RecordingScoring, task: asyncio.Task) -> None:  # pragma: no cover
        raise NotImplementedError

    async def test_replicas_split_keys_and_survivors_take_over(self, bus_url, namespace):
        settings = ScoringSettings(bus_url=bus_url, namespace=namespace, cluster="c1", http_port=0,
                                   http_host="127.0.0.1")
        members = balanced_members(self.REPLICAS)
        buses = [make_bus(bus_url, namespace, source="scoring") for _ in members]
        replicas, tasks = [], []
        t0 = datetime.now(timezone.utc)
        try:
            for bus, member in zip(buses, members):
                bus.backend.member_id = member  # before it joins any group
                await bus.__aenter__()
                replicas.append(RecordingScoring(settings, bus=bus))
            # Started together, as a scaled Deployment's pods are: one rebalance, not one per replica.
            starting = [asyncio.ensure_future(start_service(r, timeout=30)) for r in replicas]
            tasks = list(await asyncio.gather(*starting))
            await wait_until(lambda: _split(replicas), timeout=20, what="the replicas to split the partitions")

            async with make_bus(bus_url, namespace, source="agents") as agents:
                first = {node: await agents.publish(_sample(node, 0.25, t0)) for node in NODES}
                await wait_until(lambda: sum(len(r.live) for r in replicas) >= len(NODES), timeout=15,
                                 what="every node's first sample handled")
                # and answered: the scores wait out their batch's linger before they are stored and the
                # samples acked; a sample not acked when its replica dies comes back live, not replayed
                await scores_stored(bus_url, namespace, first.values())
                handled = _handlers(replicas, 0.25)
                assert sorted(handled) == NODES
                assert all(len(who) == 1 for who in handled.values()), \
                    f"a key handled by two replicas: {[n for n, w in handled.items() if len(w) > 1]}"
                owner = {node: who[0] for node, who in handled.items()}
                assert set(owner.values()) == set(range(self.REPLICAS)), "every replica gets some keys"
                for node, i in owner.items():  # keys follow partitions
                    assert partition_for(node, PARTITIONS) in replicas[i].owned()
                for i, replica in enumerate(replicas):  # and /metrics says which partitions a replica handled
                    mine = [n for n, j in owner.items() if j == i]
                    assert _handled_on_metrics(replica) == Counter(partition_for(n, PARTITIONS) for n in mine)

                victim, survivors = replicas[0], replicas[1:]
                moved = sorted(n for n, i in owner.items() if i == 0)
                await self.remove(victim, tasks[0])
                await wait_until(lambda: _split(survivors), timeout=20,
                                 what="the survivors to share every partition")
                second = {node: await agents.publish(_sample(node, 0.75, t0 + timedelta(seconds=10)))
                          for node in NODES}
                await wait_until(lambda: len(_handlers(survivors, 0.75)) == len(NODES), timeout=15,
                                 what="every node's second sample handled by a survivor")
                await scores_stored(bus_url, namespace, second.values())
            handled = _handlers(survivors, 0.75)
            assert all(len(who) == 1 for who in handled.values())
            assert moved and all(partition_for(n, PARTITIONS) in survivors[handled[n][0]].owned() for n in moved)
            # The survivors rebuilt the moved keys' sample windows from history.
            assert set(moved) <= set().union(*(s.replayed for s in survivors))

            async with make_bus(bus_url, namespace, source="reader") as reader:
                scores = [e async for _, e in reader.read("score.node", StartAt.earliest())]
            by_cause = {score.sample: score for score in figures_in(scores)}
            assert {e.id for e in first.values()} <= set(by_cause), "a first sample without its score"
            assert {e.id for e in second.values()} <= set(by_cause), "a second sample without its score"
            # Each second score counts the node's first sample too, on the replica that kept it
            # and on the one that took it over: state moved with the keys.
            assert Counter(by_cause[e.id].peak.samples for e in second.values()) == Counter({2: len(NODES)})
        finally:
            # Together: one by one, each stop would start a rebalance the next one has to sit out.
            await asyncio.gather(*(stop_service(r, t) for r, t in zip(replicas, tasks) if not t.done()))
            for bus in buses:
                await bus.__aexit__(None, None, None)


class TestNatsScale(ScaleContract):
    @pytest.fixture
    def bus_url(self, nats_server) -> str:
        return nats_server.url

    async def remove(self, replica: RecordingScoring, task: asyncio.Task) -> None:
        """As the group sees a killed process: its connection ends without
        leaving the group, so the others notice by missed heartbeats."""
        await replica.bus.backend.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class TestKafkaScale(ScaleContract):
    @pytest.fixture
    def bus_url(self, kafka_server) -> str:
        return kafka_server.url

    async def remove(self, replica: RecordingScoring, task: asyncio.Task) -> None:
        """A stopped replica (SIGTERM): it commits and leaves the group."""
        await stop_service(replica, task)
