"""The scoring service over a real NATS server."""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone

from builders import figures_in, metrics, pod
from conftest import make_bus, patience, start_service, stop_service, wait_until, wait_until_async
from tidal_bus import StartAt
from tidal_schemas import PodUsage
from tidal_schemas.streams import stream
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings

T_S = 1.0  # adjust time T; settle time 4T = 4 s


def _settings(url: str, namespace: str, **overrides) -> ScoringSettings:
    values = dict(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1",
                  period_s=0.2, settle_time="4s", peak_min_samples=3)
    values.update(overrides)
    return ScoringSettings(**values)


async def _start(settings) -> tuple[ScoringService, asyncio.Task]:
    service = ScoringService(settings)
    return service, await start_service(service)


_stop = stop_service


async def _events(bus, name: str) -> list:
    return [e async for _, e in bus.read(name, StartAt.earliest())]


async def _scores(bus, user: str | None = None, resource: str = "cpu") -> list:
    """The user scores published so far of `resource` (of `user`, or every user's)."""
    return [e.payload for e in await _events(bus, "score.user")
            if e.payload.resource_type == resource and user in (None, e.payload.user)]


async def _node_scores(bus, count: int, timeout: float = 10.0) -> list:
    """The node scores stored once there are `count` (whatever events hold them)."""
    deadline = time.monotonic() + patience(timeout)
    while True:
        scores = figures_in(await _events(bus, "score.node"))
        if len(scores) >= count or time.monotonic() > deadline:
            return scores
        await asyncio.sleep(0.05)


async def _at_least(bus, count: int) -> bool:
    return len(await _scores(bus, "alice")) >= count


def _closed_form(usage: float, started: datetime, at: datetime) -> float:
    """s(t) for a constant usage u since `started`: u (1 - e^(-(t - started)/T))."""
    return usage * (1 - math.exp(-(at - started).total_seconds() / T_S))


async def test_node_scores_with_load_and_peak(nats_server, namespace):
    service, task = await _start(_settings(nats_server.url, namespace))
    t0 = datetime.now(timezone.utc)
    async with make_bus(nats_server.url, namespace) as bus:
        for i in range(4):
            sample = metrics("n1", sampled_at=t0 + timedelta(seconds=10 * i), memory_total_mib=1000,
                             memory_used_mib=100 * (i + 1),
                             pods=[PodUsage(pod="ns/p", cpu_milli=500 * (i + 1), memory_mib=100 * (i + 1))],
                             cpu_util={0: 0.2, 1: 0.6})
            sample = sample.model_copy(update={"numa_load": {0: 0.2, 1: 0.6}})
            await bus.publish(sample)
        scores = await _node_scores(bus, 4)
    await _stop(service, task)
    assert [s.load for s in scores] == [0.4] * 4  # mean of NUMA loads 0.2 and 0.6
    assert scores[0].numa_load == {0: 0.2, 1: 0.6}
    first, last = scores[0].peak, scores[-1].peak
    assert first.utilisation is None and "too few samples" in first.reason and first.samples == 1
    # percentile of summed pod usage / capacity over 4 samples; capacity = 2 CPUs (2000 m) and 1000 MiB
    assert last.estimator == "percentile" and last.samples == 4 and last.window_s == 300
    assert last.cpu_milli == 2000 and last.utilisation is not None


async def test_fair_share_follows_the_closed_form_across_a_restart(nats_server, namespace):
    started = datetime.now(timezone.utc)
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(pod("train", phase="running", node="n1", cpu_milli=4000, user="alice",
                              started_at=started))
        service, task = await _start(_settings(nats_server.url, namespace))
        await wait_until(lambda: len([e for e in service.books.get("c1", {}).records()]) > 0 if service.books else False,
                         timeout=10, what="first fair-share update")
        # updates counted, not waited for by the clock: three before the restart, three after
        await wait_until_async(lambda: _at_least(bus, 3), 10, "three updates before the restart")
        await _stop(service, task)  # restart mid-stream
        before = len(await _scores(bus, "alice"))
        await asyncio.sleep(0.5)  # the gap the restart leaves: at least this long
        service, task = await _start(_settings(nats_server.url, namespace))
        await wait_until_async(lambda: _at_least(bus, before + 3), 10, "three updates after the restart")
        await _stop(service, task)
        events = [e for e in await _events(bus, "score.user") if e.payload.user == "alice"]
    cpu = [e.payload for e in events if e.payload.resource_type == "cpu"]
    assert len(cpu) >= 6
    for score in cpu:
        assert math.isclose(score.score, _closed_form(4000, started, score.updated_at), rel_tol=1e-9), score
    memory = [e.payload for e in events if e.payload.resource_type == "memory"]
    assert memory and all(math.isclose(s.score, _closed_form(512, started, s.updated_at), rel_tol=1e-9)
                          for s in memory)
    updates = [s.updated_at for s in cpu]
    gaps = [(b - a).total_seconds() for a, b in zip(updates, updates[1:])]
    assert max(gaps) > 0.3, "the restart left a gap, closed by one catch-up update"


async def test_two_replicas_split_keys_and_agree(nats_server, namespace):
    started = datetime.now(timezone.utc)
    users = [f"user{i}" for i in range(8)]
    async with make_bus(nats_server.url, namespace) as bus:
        for i, user in enumerate(users):
            await bus.publish(pod(f"job{i}", phase="running", node="n1", cpu_milli=1000 * (i + 1), user=user,
                                  started_at=started))
        a, task_a = await _start(_settings(nats_server.url, namespace))
        b, task_b = await _start(_settings(nats_server.url, namespace))
        partitions = stream("score.user").partitions
        await wait_until(lambda: a.owned_score_partitions and b.owned_score_partitions
                         and not a.owned_score_partitions & b.owned_score_partitions
                         and len(a.owned_score_partitions | b.owned_score_partitions) == partitions,
                         timeout=15, what="replicas to split score.user")
        async def every_user_scored() -> bool:
            return {s.user for s in await _scores(bus)} == set(users)

        await wait_until_async(every_user_scored, 10, "a score of every user")
        await _stop(a, task_a)
        await _stop(b, task_b)
        events = await _events(bus, "score.user")
    assert {e.payload.user for e in events} == set(users)
    by_update = defaultdict(set)
    for e in events:
        p = e.payload
        by_update[(p.user, p.resource_type, p.updated_at)].add(e.id)
        usage = 1000 * (users.index(p.user) + 1) if p.resource_type == "cpu" else 512
        assert math.isclose(p.score, _closed_form(usage, started, p.updated_at), rel_tol=1e-9)
    assert all(len(ids) == 1 for ids in by_update.values()), "one update, one event id"
