"""Spans recorded in memory by the real OpenTelemetry SDK, for tests: the
`spans` fixture installs a provider for the bus's spans and takes it away
again after the test."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tidal_bus import tracing


class Spans:
    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def all(self) -> list:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str, **attributes) -> list:
        """Finished spans called `name` whose `tidal.<attr>` attributes match."""
        return [s for s in self.all() if s.name == name
                and all(s.attributes.get(f"tidal.{k}") == v for k, v in attributes.items())]

    def one(self, name: str, **attributes):
        found = self.named(name, **attributes)
        assert found, f"no span {name} {attributes}; have {sorted({s.name for s in self.all()})}"
        return found[0]


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing.use(provider)
    try:
        yield Spans(exporter)
    finally:
        tracing.use(previous)
        provider.shutdown()


def trace_id(span) -> str:
    return f"{span.context.trace_id:032x}"


def parent_id(span) -> str | None:
    return f"{span.parent.span_id:016x}" if span.parent is not None else None


def span_id(span) -> str:
    return f"{span.context.span_id:016x}"
