"""What every Tidal service shares: the lifecycle around its handlers.

A service declares its subscriptions and background loops; `run()` connects
the bus, serves /healthz /readyz /metrics, runs every consumer and loop in
one TaskGroup (a failure anywhere stops the service with that error instead
of being lost), and on `stop()` drains: consumers finish the message in hand,
commit, and leave their groups; loops are cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tidal_bus import Bus, Consumer, Delivery, Handler, StartAt
from tidal_bus.membership import cancel_until_done, raise_if_cancelling
from tidal_schemas import Envelope, Payload, StageJournal

from .bus_health import unavailability
from .collector import collect_oldest_only_when_asked, collect_periodically
from .heap import pad_heap_top
from .http import HealthServer
from .journal import Journal, journal_parts
from .logs import configure_logging
from .metrics import ServiceMetrics
from .settings import ServiceSettings
from .task_log import log_tasks
from .tracing_setup import TracingConfigError, configure_tracing


@dataclass(frozen=True)
class Subscription:
    """One stream a service consumes. Replicas share `group` (default: the
    service name) and split the stream's partitions between them."""

    stream: str
    handler: Handler
    group: str | None = None
    start: StartAt = field(default_factory=StartAt.earliest)
    replay_on_assign: bool = True
    ordered: bool = True
    on_assign: Callable[[frozenset[int], frozenset[int]], Awaitable[None]] | None = None
    """Told (gained, lost) partitions before gained ones are replayed."""
    windowed: bool = False
    """Outputs (and work the handler defers, `tidal_bus.defer`) are waited
    for `settings.output_window` events at a time (the per-sample stages: an
    output per event, 500 events a second; the bridge's binds)."""
    lingering: bool = False
    """The events are read in batches that linger `settings.input_linger_s`
    (the per-sample stages: the latest sample per node is what counts)."""


class Service:
    """Base class; subclasses set `name`, `settings_class`, and override
    `subscriptions()`, `loops()`, `on_start()` / `on_stop()` as needed."""

    name: ClassVar[str] = "service"
    settings_class: ClassVar[type[ServiceSettings]] = ServiceSettings
    produces: ClassVar[tuple[str, ...]] = ()  # streams it writes (what `tidal demo` waits for)
    reads_back: ClassVar[tuple[str, ...]] = ()  # of those, what it reads back itself (Bus.reads_back)

    def __init__(self, settings: ServiceSettings | None = None, *, bus: Bus | None = None) -> None:
        self.settings = settings or self.settings_class()
        self.bus = bus or Bus.from_url(
            self.settings.bus_url, namespace=self.settings.namespace, cluster=self.settings.cluster, source=self.name,
            **self.settings.bus_options(),
        )
        self._owns_bus = bus is None
        self.metrics = ServiceMetrics(self.name)
        self.log = logging.getLogger(f"tidal.{self.name}")
        self.consumers: list[Consumer] = []
        self.http: HealthServer | None = None
        self._stop_requested = asyncio.Event()
        self._started = asyncio.Event()
        self._bus_unavailable: str | None = None  # what the last look at the broker found wrong
        self.journal: Journal | None = None  # a stage that keeps one has it published (journal.py)
        self._journal_seq: dict[str, int] = {}  # cluster -> journal events published

    # -- what subclasses declare ------------------------------------------------
    def subscriptions(self) -> list[Subscription]:
        return []

    def loops(self) -> list[Callable[[], Awaitable[None]]]:
        """Long-running coroutines (periodic work); each must run until cancelled."""
        return []

    async def on_start(self) -> None:
        """After the bus is connected, before consumers start."""

    async def on_stop(self) -> None:
        """After consumers and loops have stopped, before the bus closes."""

    # -- helpers for subclasses -------------------------------------------------
    async def publish(self, payload: Payload, *, cause: Envelope[Any] | None = None,
                      delivery: Delivery | None = None, **options: Any) -> Envelope[Any] | None:
        """Publish an output. While replaying history to rebuild state, the
        output was already published the first time: it is not repeated."""
        if self.replaying(delivery, payload.TYPE):
            return None
        envelope = await self.bus.publish(payload, cause=cause, **options)
        self.metrics.published(payload.TYPE)
        return envelope

    def replaying(self, delivery: Delivery | None, event_type: str) -> bool:
        """Whether `delivery` is history replayed to rebuild state: its
        outputs (of `event_type`) were published the first time, and are
        counted as suppressed, not published again."""
        if delivery is None or not delivery.replaying:
            return False
        self.metrics.suppressed.labels(self.name, event_type).inc()
        return True

    def default_group(self) -> str:
        """Replicas serving the same clusters share a group; deployments for
        other clusters on the same bus get their own, or they would split the
        partitions and each skip the other's events."""
        clusters = self.settings.handled_clusters()
        return self.name if clusters is None else f"{self.name}-{'+'.join(sorted(clusters))}"

    # -- lifecycle --------------------------------------------------------------
    def ready(self) -> tuple[bool, str]:
        if not self._started.is_set():
            return False, "starting"
        why = "bus disconnected" if not self.bus.backend.connected else self._bus_unavailable
        if why is not None:
            return False, why
        waiting = [c.spec.name for c in self.consumers if not c.ready.is_set()]
        if waiting:
            return False, f"joining consumer groups: {', '.join(waiting)}"
        return True, "ok"

    def stop(self) -> None:
        """Ask the service to drain and exit (what SIGTERM does)."""
        self._stop_requested.set()

    async def run(self) -> None:
        if self._owns_bus:
            await self.bus.backend.connect()
        try:
            await self.bus.ensure_streams()
            self.bus.reads_back(*self.reads_back)
            self.http = HealthServer(self.settings.http_host, self.settings.http_port, self.ready,
                                     self.metrics.render, fd=self.settings.http_fd)
            await self.http.start()
            self.log.info("serving /healthz /readyz /metrics on port %s", self.http.port)
            self.consumers = [
                self.bus.consumer(
                    sub.stream, sub.group or self.default_group(), sub.handler, start=sub.start,
                    clusters=self.settings.handled_clusters(), ordered=sub.ordered,
                    replay_on_assign=sub.replay_on_assign, on_assign=sub.on_assign, observer=self.metrics,
                    window=self.settings.output_window if sub.windowed else 1,
                    linger_s=self.settings.input_linger_s if sub.lingering else 0.0,
                )
                for sub in self.subscriptions()
            ]
            await self.on_start()
            self._started.set()
            async with asyncio.TaskGroup() as group:
                consumer_tasks = [group.create_task(c.run(), name=f"{self.name}:{c.spec.name}")
                                  for c in self.consumers]
                loops = [*self.loops(), self._measure_lag, self._watch_bus,
                         *([self._publish_journal] if self.journal else [])]
                loop_tasks = [group.create_task(loop(), name=f"{self.name}:{getattr(loop, '__name__', 'loop')}")
                              for loop in loops]
                group.create_task(self._drain_on_stop(consumer_tasks, loop_tasks), name=f"{self.name}:drain")
            await self.on_stop()
            try:
                await self.flush_journal()
            except Exception as exc:
                self.log.warning("stopping: the journal's last steps were not published: %r", exc)
        finally:
            if self.http is not None:
                await self.http.stop()
            if self._owns_bus:
                await self.bus.backend.close()

    def journal_settings(self) -> dict[str, Any]:
        """What the first journal event carries: the service's own settings
        (not the bus's, the port's or the log's), which its decisions depend on."""
        own = set(type(self.settings).model_fields) - set(ServiceSettings.model_fields)
        return self.settings.model_dump(include=own, mode="json")

    async def _watch_bus(self) -> None:
        """/readyz says not ready while the broker cannot take writes (a cluster without quorum)."""
        async for why in unavailability(self.bus.backend, self.settings.bus_check_s):
            self._bus_unavailable = why

    async def _publish_journal(self) -> None:
        while True:
            await asyncio.sleep(self.settings.journal_s)
            try:
                await self.flush_journal()
            except Exception as exc:  # the broker away: the steps wait for the next flush
                raise_if_cancelling()
                self.log.warning("journal not published (kept for the next try): %r", exc)

    async def flush_journal(self) -> None:
        """Publish the steps taken since the last flush, per cluster. Steps
        not published (the broker refused or was away) go back to the
        journal, ahead of newer ones, and the error is raised."""
        if self.journal is None:
            return
        for cluster, steps in self.journal.drain().items():
            if lost := self.journal.lost.pop(cluster, 0):  # a gap in seq says so to every replay
                self.log.error("journal of cluster %s: %d steps dropped while the broker took none", cluster, lost)
                self._journal_seq[cluster] = self._journal_seq.get(cluster, 0) + 1
            parts = list(journal_parts(steps))
            for n, part in enumerate(parts):
                seq = self._journal_seq.get(cluster, 0)
                try:
                    await self.bus.publish(StageJournal(
                        stage=self.name, member=self.bus.backend.member_id, seq=seq, steps=part,
                        settings=self.journal_settings() if seq == 0 else {}), cluster=cluster)
                except BaseException:
                    self.journal.put_back(cluster, [step for rest in parts[n:] for step in rest])
                    raise
                self._journal_seq[cluster] = seq + 1

    async def _measure_lag(self) -> None:
        """Every `lag_interval_s`, each consumer's lag per partition, from the
        broker, for /metrics: a stuck or paused handler shows its backlog."""
        while True:
            await asyncio.sleep(self.settings.lag_interval_s)
            for consumer in self.consumers:
                if consumer.subscription is None:
                    continue
                try:
                    lags = await consumer.subscription.lag()
                except Exception as exc:  # the broker away: keep the last figures
                    self.log.debug("lag of %s not measured: %r", consumer.spec.name, exc)
                    continue
                finally:
                    raise_if_cancelling()  # a client's wait_for may have swallowed the stop
                self.metrics.lag_measured(consumer.spec.name, lags)

    async def _drain_on_stop(self, consumer_tasks: list[asyncio.Task], loop_tasks: list[asyncio.Task]) -> None:
        await self._stop_requested.wait()
        self.log.info("stopping: draining %d consumers", len(self.consumers))
        for task in loop_tasks:
            task.cancel()
        for consumer in self.consumers:
            consumer.stop()
        done, pending = await asyncio.wait(consumer_tasks, timeout=self.settings.drain_timeout_s) \
            if consumer_tasks else (set(), set())
        for task in pending:  # a consumer stuck past the drain timeout: say where, then cut it off
            where = "".join(traceback.format_stack(task.get_stack(limit=8)[-1])) if task.get_stack() else "?"
            self.log.warning("consumer %s did not drain in %.0fs; cancelling it (stuck at: %s)", task.get_name(),
                             self.settings.drain_timeout_s, where.strip().splitlines()[-2:] if where else "?")
            task.cancel()
        await cancel_until_done([*loop_tasks, *pending])


def run_service(service_class: type[Service], settings: ServiceSettings | None = None) -> int:
    """Run a service in this process until SIGTERM/SIGINT; the exit code."""
    settings = settings or service_class.settings_class()
    configure_logging(service_class.name, settings.log_level)
    log = logging.getLogger(f"tidal.{service_class.name}")
    try:
        provider = configure_tracing(service_class.name)
    except TracingConfigError as exc:
        log.error("service %s cannot start: %s", service_class.name, exc)
        return 2

    async def main() -> None:
        service = service_class(settings)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, service.stop)
        loop.add_signal_handler(signal.SIGUSR1, log_tasks, log)
        pad_heap_top()
        collecting = None
        if settings.gc_full_every_s:
            collect_oldest_only_when_asked()
            collecting = asyncio.create_task(collect_periodically(settings.gc_full_every_s), name="full collections")
        try:
            await service.run()
        finally:
            if collecting is not None:
                collecting.cancel()

    try:
        asyncio.run(main())
    except Exception as exc:  # the service failed: say why on one line, exit non-zero
        log.error("service %s failed: %s", service_class.name, _describe(exc), exc_info=exc)
        return 1
    finally:
        if provider is not None:
            provider.shutdown()  # sends the spans still batched
    return 0


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"
