"""A slow consumer: the scoring stage paused for a while — its handler
blocked, or the service stopped — catches up from its group's durable
position, each sample scored once, and its lag shows on /metrics per stream
and partition while it is behind, back to 0 once it has caught up.

Over real NATS and real Kafka (Tansu), the real scoring service in this
process; lag is asked of the broker every `lag_interval_s` (here 0.1 s).
"""

from __future__ import annotations

import asyncio
import re
import urllib.request

from builders import metrics, figures_in
from conftest import make_bus, patience, start_service, stop_service, wait_until
from tidal_bus import StartAt
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings

LAG = re.compile(r'^tidal_consumer_lag\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$', re.M)
NODES = [f"n{i}" for i in range(40)]  # keys over every partition of node.metrics


def lag_on_metrics(service) -> dict[tuple[str, str], float]:
    """(stream, partition) -> lag, as /metrics shows it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{service.http.port}/metrics", timeout=patience(2)) as response:
        text = response.read().decode()
    found = {}
    for match in LAG.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels")))
        found[(labels["stream"], labels["partition"])] = float(match.group("value"))
    return found


async def metrics_lag(service, stream: str = "node.metrics") -> dict[str, float]:
    return {p: v for (s, p), v in (await asyncio.to_thread(lag_on_metrics, service)).items() if s == stream}


def scoring(bus, url: str, namespace: str) -> ScoringService:
    settings = ScoringSettings(bus_url=url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1",
                               lag_interval_s=0.1)
    return ScoringService(settings, bus=bus)


async def scored(bus) -> list[str]:
    """The samples scored so far: the `node.metrics` ids the scores answer."""
    return [score.sample for score in figures_in([e async for _, e in bus.read("score.node", StartAt.earliest())])]


async def test_a_blocked_handler_shows_its_lag_and_catches_up(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus, make_bus(bus_url, namespace, "scoring") as own:
        service = scoring(own, bus_url, namespace)
        gate, handled = asyncio.Event(), []
        gate.set()
        on_metrics = service.on_metrics

        async def gated(envelope, delivery):  # the stage, paused while the gate is closed
            await gate.wait()
            await on_metrics(envelope, delivery)
            handled.append(envelope.id)

        service.on_metrics = gated
        task = await start_service(service, timeout=60)
        first = [await bus.publish(metrics(n)) for n in NODES[:4]]
        await wait_until(lambda: len(handled) == 4, timeout=30, what="the first samples")

        async def lag_is(predicate) -> bool:
            return predicate(await metrics_lag(service))

        gate.clear()  # paused: samples keep coming
        later = [await bus.publish(metrics(n, load=0.7)) for n in NODES for _ in range(3)]
        await wait_for(lambda: lag_is(lambda lag: sum(lag.values()) >= len(later) - 1), "the backlog on /metrics")
        behind = await metrics_lag(service)
        assert len([p for p, v in behind.items() if v > 0]) > 1, f"lag is shown per partition: {behind}"
        assert not task.done()

        gate.set()  # resumed: it catches up, each sample once, and the lag goes back to 0
        await wait_until(lambda: len(handled) == len(first) + len(later), timeout=60, what="catching up")
        await wait_for(lambda: lag_is(lambda lag: lag and all(v == 0 for v in lag.values())), "lag back to 0")
        assert sorted(handled) == sorted(e.id for e in first + later)
        answers = await scored(bus)
        assert sorted(answers) == sorted(e.id for e in first + later), "every sample scored once"
        await stop_service(service, task)


async def test_a_stopped_stage_resumes_from_its_durable_position(bus_url, namespace):
    async with make_bus(bus_url, namespace) as bus:
        async with make_bus(bus_url, namespace, "scoring") as own:
            first_service = scoring(own, bus_url, namespace)
            task = await start_service(first_service, timeout=60)
            first = [await bus.publish(metrics(n)) for n in NODES[:8]]

            async def first_scored() -> bool:
                return len(await scored(bus)) == len(first)

            await wait_for(first_scored, "the first samples scored")
            await stop_service(first_service, task)  # the stage goes away for a while

        later = [await bus.publish(metrics(n, load=0.3)) for n in NODES]

        async with make_bus(bus_url, namespace, "scoring") as own:
            second = scoring(own, bus_url, namespace)
            task = await start_service(second, timeout=60)

            async def all_scored() -> bool:
                return len(await scored(bus)) >= len(first) + len(later)

            await wait_for(all_scored, "the samples published while it was away")
            await wait_for(lambda: _zero(second), "lag back to 0")
            answers = await scored(bus)
            assert sorted(answers) == sorted(e.id for e in first + later), "resumed where it was: none twice, none lost"
            await stop_service(second, task)


async def _zero(service) -> bool:
    lag = await metrics_lag(service)
    return bool(lag) and all(v == 0 for v in lag.values())


async def wait_for(check, what: str, timeout: float = 60.0) -> None:
    """`wait_until` for an async check."""
    deadline = asyncio.get_running_loop().time() + patience(timeout)
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {patience(timeout):g}s waiting for {what}")
        await asyncio.sleep(0.1)
