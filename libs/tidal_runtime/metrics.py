"""Prometheus metrics of one service: events in/out, handler latency, dead
letters, duplicates and consumer lag, per stream."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class ServiceMetrics:
    """Owns a registry per service instance (tests run several in one process)."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["service", "stream"]
        self.service = service
        self.events_in = Counter("tidal_events_in_total", "Events received", labels, registry=self.registry)
        self.events_out = Counter("tidal_events_out_total", "Events published", labels, registry=self.registry)
        self.suppressed = Counter("tidal_events_suppressed_total",
                                  "Outputs not republished while replaying", labels, registry=self.registry)
        self.handler_seconds = Histogram("tidal_handler_seconds", "Handler latency", labels, registry=self.registry,
                                         buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self.dead_letters = Counter("tidal_dead_letters_total", "Events sent to dead.letter", labels,
                                    registry=self.registry)
        self.duplicates = Counter("tidal_duplicates_total", "Redelivered events skipped", labels,
                                  registry=self.registry)
        self.lag = Gauge("tidal_consumer_lag", "Messages not yet delivered to this consumer", labels,
                         registry=self.registry)
        self.handled_by_partition = Counter("tidal_partition_events_handled_total",
                                            "Events handled per partition (shows how replicas split the keys)",
                                            [*labels, "partition"], registry=self.registry)

    # ConsumerObserver
    def received(self, stream: str, pending: int | None) -> None:
        self.events_in.labels(self.service, stream).inc()
        if pending is not None:
            self.lag.labels(self.service, stream).set(pending)

    def handled(self, stream: str, seconds: float, partition: int | None = None) -> None:
        self.handler_seconds.labels(self.service, stream).observe(seconds)
        if partition is not None:
            self.handled_by_partition.labels(self.service, stream, str(partition)).inc()

    def dead_lettered(self, stream: str) -> None:
        self.dead_letters.labels(self.service, stream).inc()

    def duplicate(self, stream: str) -> None:
        self.duplicates.labels(self.service, stream).inc()

    def published(self, stream: str) -> None:
        self.events_out.labels(self.service, stream).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
