"""The service runtime over a real NATS server: health and metrics endpoints,
state rebuilt by replay without repeating outputs, graceful drain, and
background failures that stop the service instead of vanishing."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request

import pytest
from pydantic import ValidationError

from builders import metrics
from conftest import make_bus, patience, wait_until
from tidal_bus import StartAt
from tidal_runtime import Service, ServiceSettings, Subscription
from tidal_runtime.logs import JsonFormatter
from tidal_schemas import NodeScore, NodeScores


class EchoSettings(ServiceSettings):
    model_config = {"env_prefix": "TIDAL_ECHO_"}


class EchoService(Service):
    """Test double: node load = mean NUMA load, published per metrics event,
    and a per-node count of samples seen (its state)."""

    name = "echo"
    settings_class = EchoSettings
    produces = ("score.node",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.samples: dict[str, int] = {}
        self.loop_error: Exception | None = None

    def subscriptions(self) -> list[Subscription]:
        return [Subscription("node.metrics", self.on_metrics)]

    def loops(self):
        async def fail_later() -> None:
            await asyncio.sleep(3600) if self.loop_error is None else None
            raise self.loop_error
        return [fail_later]

    async def on_metrics(self, envelope, delivery) -> None:
        m = envelope.payload
        self.samples[m.node] = self.samples.get(m.node, 0) + 1
        load = sum(m.numa_load.values()) / len(m.numa_load)
        score = NodeScore(node=m.node, load=load, numa_load=m.numa_load, sampled_at=m.sampled_at)
        await self.publish(NodeScores.of(score), cause=envelope, delivery=delivery)


def _settings(bus_url: str, namespace: str) -> EchoSettings:
    return EchoSettings(bus_url=bus_url, namespace=namespace, cluster="c1", http_port=0, http_host="127.0.0.1")


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=patience(2)) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def _scores(bus) -> list:
    return [e async for _, e in bus.read("score.node", StartAt.earliest())]


async def test_health_metrics_and_outputs(nats_server, namespace):
    service = EchoService(_settings(nats_server.url, namespace))
    task = asyncio.create_task(service.run())
    await wait_until(lambda: service.ready()[0], what="service ready")
    base = f"http://127.0.0.1:{service.http.port}"
    assert (await asyncio.to_thread(_get, f"{base}/healthz"))[0] == 200
    status, body = await asyncio.to_thread(_get, f"{base}/readyz")
    assert status == 200 and json.loads(body)["ready"] is True

    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(metrics("n1", load=0.4))
        await bus.publish_raw("node.metrics", "junk", b"{not json")
        await wait_until(lambda: service.samples.get("n1") == 1, what="handled")
        await wait_until(lambda: service.metrics.dead_letters.labels("echo", "node.metrics")._value.get() == 1,
                         what="dead letter counted")
        scores = await _scores(bus)
    assert [s.payload.items[0].load for s in scores] == [0.4]
    assert scores[0].source == "echo" and scores[0].causation_id is not None

    _, text = await asyncio.to_thread(_get, f"{base}/metrics")
    text = text.decode()
    assert 'tidal_events_in_total{service="echo",stream="node.metrics"} 2.0' in text
    assert 'tidal_events_out_total{service="echo",stream="score.node"} 1.0' in text
    assert 'tidal_dead_letters_total{service="echo",stream="node.metrics"} 1.0' in text
    assert "tidal_consumer_lag" in text and "tidal_handler_seconds_bucket" in text

    service.stop()
    await asyncio.wait_for(task, patience(30))


async def test_restart_rebuilds_state_without_repeating_outputs(nats_server, namespace):
    async with make_bus(nats_server.url, namespace) as bus:
        for i in range(3):
            await bus.publish(metrics("n1", load=0.1 * (i + 1)))
        first = EchoService(_settings(nats_server.url, namespace))
        task = asyncio.create_task(first.run())
        await wait_until(lambda: first.samples.get("n1") == 3, what="first run")
        first.stop()
        await asyncio.wait_for(task, patience(30))

        await bus.publish(metrics("n1", load=0.9))
        second = EchoService(_settings(nats_server.url, namespace))
        task = asyncio.create_task(second.run())
        await wait_until(lambda: second.samples.get("n1") == 4, timeout=15, what="replay + new event")
        second.stop()
        await asyncio.wait_for(task, patience(30))
        scores = await _scores(bus)
    assert second.samples == {"n1": 4}, "state rebuilt from the log"
    assert [round(s.payload.items[0].load, 2) for s in scores] == [0.1, 0.2, 0.3, 0.9], "no output repeated"
    assert second.metrics.suppressed.labels("echo", "score.node")._value.get() == 3


async def test_failing_background_task_stops_the_service_with_its_error(nats_server, namespace):
    service = EchoService(_settings(nats_server.url, namespace))
    service.loop_error = RuntimeError("disk full")
    with pytest.raises(BaseExceptionGroup) as caught:
        await asyncio.wait_for(service.run(), patience(30))
    assert any("disk full" in str(e) for e in caught.value.exceptions)


async def test_not_ready_until_started(nats_server, namespace):
    service = EchoService(_settings(nats_server.url, namespace))
    assert service.ready() == (False, "starting")


async def test_lingering_subscriptions_read_in_lingering_batches_and_the_others_do_not(nats_server, namespace):
    class PerSample(EchoService):
        def subscriptions(self) -> list[Subscription]:
            return [Subscription("node.metrics", self.on_metrics, windowed=True, lingering=True),
                    Subscription("node.topology", self.on_topology),
                    Subscription("pod.lifecycle", self.on_topology, windowed=True)]  # a window, no linger

        async def on_topology(self, envelope, delivery) -> None:
            pass

    settings = EchoSettings(bus_url=nats_server.url, namespace=namespace, cluster="c1", http_port=0,
                            http_host="127.0.0.1", input_linger_s=0.5)
    service = PerSample(settings)
    task = asyncio.create_task(service.run())
    await wait_until(lambda: service.ready()[0], what="service ready")
    assert {c.spec.name: (c.linger_s, c.window.size) for c in service.consumers} == {
        "node.metrics": (0.5, settings.output_window), "node.topology": (0.0, 1),
        "pod.lifecycle": (0.0, settings.output_window)}
    async with make_bus(nats_server.url, namespace) as bus:
        await bus.publish(metrics("n1", load=0.4))
        await wait_until(lambda: service.samples.get("n1") == 1, what="the sample handled after its linger")
    service.stop()
    await asyncio.wait_for(task, patience(30))


def test_settings_read_shared_and_prefixed_variables(monkeypatch):
    monkeypatch.setenv("TIDAL_BUS_URL", "kafka://broker:9092")
    monkeypatch.setenv("TIDAL_CLUSTER", "eu-1")
    monkeypatch.setenv("TIDAL_ECHO_HTTP_PORT", "9100")
    monkeypatch.setenv("TIDAL_HTTP_PORT", "1")  # another service's style of name: ignored
    settings = EchoSettings()
    assert (settings.bus_url, settings.cluster, settings.http_port) == ("kafka://broker:9092", "eu-1", 9100)
    assert settings.handled_clusters() == frozenset({"eu-1"})


def test_settings_reject_bad_values_naming_them(monkeypatch):
    monkeypatch.setenv("TIDAL_ECHO_HTTP_PORT", "lots")
    with pytest.raises(ValidationError, match="http_port"):
        EchoSettings()
    monkeypatch.delenv("TIDAL_ECHO_HTTP_PORT")
    monkeypatch.setenv("TIDAL_NAMESPACE", "Bad Name")
    with pytest.raises(ValidationError, match="namespace"):
        EchoSettings()
    monkeypatch.delenv("TIDAL_NAMESPACE")
    for linger in ("-0.1", "6"):
        monkeypatch.setenv("TIDAL_ECHO_INPUT_LINGER_S", linger)
        with pytest.raises(ValidationError, match="input_linger_s"):
            EchoSettings()


def test_json_log_lines():
    record = logging.LogRecord("tidal.echo", logging.WARNING, __file__, 1, "lag is %d", (42,), None)
    record.node = "n1"
    line = json.loads(JsonFormatter("echo").format(record))
    assert line["msg"] == "lag is 42" and line["level"] == "warning"
    assert line["service"] == "echo" and line["node"] == "n1" and line["ts"].endswith("Z")


class SwallowingService(EchoService):
    """A loop that swallows the first cancel, as Python 3.11's wait_for does
    when a reply races the cancel, and then runs on."""

    def loops(self):
        async def swallow_once() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.swallowed = True
            while True:
                await asyncio.sleep(0.05)
        return [swallow_once]


async def test_a_loop_that_swallows_its_cancel_still_stops(nats_server, namespace):
    service = SwallowingService(_settings(nats_server.url, namespace))
    service.swallowed = False
    task = asyncio.create_task(service.run())
    await wait_until(lambda: service.ready()[0], timeout=20, what="echo ready")
    service.stop()
    await asyncio.wait_for(task, patience(10))
    assert service.swallowed, "the loop saw the first cancel and ran on"
