"""Real brokers for the whole run: one nats-server (JetStream, file storage)
and one Tansu Kafka-protocol broker, each on a free port in a temp dir.
Tests isolate themselves by namespace, never by sharing state."""

from __future__ import annotations

import os

# gRPC's fork handlers are off wherever grpc comes in (tidal_kubelet_api says why);
# a test that imports grpc itself first gets the same.
import tidal_kubelet_api  # noqa: E402,F401

import asyncio  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

import file_weights  # noqa: E402
from tidal_bus import Bus  # noqa: E402
from tidal_bus.embedded import EmbeddedKafka, EmbeddedNats  # noqa: E402


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory):
    server = EmbeddedNats(tmp_path_factory.mktemp("nats")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory: pytest.TempPathFactory):
    server = EmbeddedKafka(tmp_path_factory.mktemp("kafka")).start()
    yield server
    server.stop()


@pytest.fixture
def own_nats(tmp_path):
    """A nats-server of the test's own, for tests that stop and restart it."""
    server = EmbeddedNats(tmp_path / "nats").start()
    yield server
    server.stop()


@pytest.fixture
def own_kafka(tmp_path):
    """A Kafka-protocol broker of the test's own, for tests that restart it."""
    server = EmbeddedKafka(tmp_path / "kafka").start()
    yield server
    server.stop()

@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex[:12]


# Fast failure detection for tests; production defaults are slower and safer.
NATS_TEST_OPTIONS = {"member_ttl_s": 1.0, "ack_wait_s": 3.0}


KAFKA_TEST_OPTIONS = {"group_options": {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500,
                                      "rebalance_timeout_ms": 6000}}


def bus_options(url: str) -> dict:
    return dict(NATS_TEST_OPTIONS) if url.startswith("nats") else dict(KAFKA_TEST_OPTIONS)


# Every wall-clock bound of a test is a guard against a hang, never a measure:
# a wait ends as soon as its condition holds, so a generous bound costs a
# passing run nothing. A bound is written as the time the wait takes at most
# on the machine it was written on, and `patience` stretches it for a machine
# four times slower and busy besides (TIDAL_TEST_SLOWER, default 5), never
# under MIN_BOUND_S: a process that must start, import and connect first is
# given half a minute at least.
SLOWER = float(os.environ.get("TIDAL_TEST_SLOWER", "5"))
MIN_BOUND_S = 30.0


def patience(seconds: float) -> float:
    """The hang guard for a wait written as `seconds` (see SLOWER)."""
    return max(seconds * SLOWER, MIN_BOUND_S)


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll `predicate` until true; fail the test with `what` once `patience(timeout)` has passed."""
    bound = patience(timeout)
    deadline = time.monotonic() + bound
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound:g}s waiting for {what}")
        await asyncio.sleep(0.02)


async def wait_until_async(check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = "condition",
                           every: float = 0.1) -> None:
    """`wait_until` for a check that awaits (a broker, an HTTP server)."""
    bound = patience(timeout)
    deadline = time.monotonic() + bound
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound:g}s waiting for {what}")
        await asyncio.sleep(every)


def wait_until_sync(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition",
                    every: float = 0.02) -> None:
    """`wait_until` for a test that is not a coroutine."""
    bound = patience(timeout)
    deadline = time.monotonic() + bound
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {bound:g}s waiting for {what}")
        time.sleep(every)


@pytest.fixture(params=["nats", "kafka"])
def bus_url(request) -> str:
    """Each broker in turn: the embedded NATS server, then the embedded Kafka-protocol broker."""
    return request.getfixturevalue(f"{request.param}_server").url


def make_bus(url: str, namespace: str, source: str = "test", cluster: str = "c1") -> Bus:
    return Bus.from_url(url, namespace=namespace, cluster=cluster, source=source, **bus_options(url))


def server_logs(*servers) -> str:
    return "\n".join(f"--- {type(s).__name__} log ---\n{s.log_tail()}" for s in servers)


def pytest_collection_modifyitems(config, items):
    """The longest files first (file_weights.py says why); the tests of a file keep their order."""
    weight = file_weights.weights()
    items.sort(key=lambda item: -weight.get(item.path.name, 0.0))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Print broker logs next to a failing test that used a broker."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call":
        servers = [item.funcargs[name] for name in ("nats_server", "kafka_server") if name in item.funcargs]
        if servers:
            report.sections.append(("broker logs", server_logs(*servers)))


ROOT = Path(__file__).resolve().parents[1]


async def start_service(service, ready=lambda s: True, timeout: float = 20.0):
    """Run a service in this event loop until it is ready (and `ready(service)`)."""
    task = asyncio.create_task(service.run())
    await wait_until(lambda: service.ready()[0] and ready(service), timeout=timeout, what=f"{service.name} ready")
    return task


async def stop_service(service, task, timeout: float = 30.0) -> None:
    """Graceful stop, as on SIGTERM, bounded in time. A service that does
    not stop fails the test with where each of its tasks is waiting."""
    service.stop()
    timeout = patience(timeout)
    done, _ = await asyncio.wait([task], timeout=timeout)
    if done:
        task.result()
        return
    stuck = [f"{t.get_name()}: {_waiting_at(t)}" for t in asyncio.all_tasks()
             if not t.done() and t.get_name().startswith(f"{service.name}:")]
    task.cancel()
    raise AssertionError(f"{service.name} did not stop within {timeout:g} s; its tasks: {stuck}")


def _waiting_at(task: asyncio.Task) -> str:
    """The chain of awaits a suspended task is in, outermost first."""
    where, awaited = [], task.get_coro()
    while awaited is not None and len(where) < 30:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None) \
            or getattr(awaited, "gi_frame", None)
        if frame is None:
            where.append(type(awaited).__name__)
            break
        where.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None) \
            or getattr(awaited, "gi_yieldfrom", None)
    return " > ".join(where) or "?"
