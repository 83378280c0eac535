"""Spans on or off, from OpenTelemetry's standard environment variables.

Off unless asked for: `OTEL_TRACES_EXPORTER` names the exporters (`otlp`,
`console`, `none`; comma-separated), and an `OTEL_EXPORTER_OTLP_ENDPOINT`
(or `…_TRACES_ENDPOINT`) alone means `otlp`. The OTLP exporter speaks
`http/protobuf` unless `OTEL_EXPORTER_OTLP_PROTOCOL` says `grpc`, and reads
its endpoint, headers and timeouts from the same environment itself. The
service is `OTEL_SERVICE_NAME`, by default `tidal-<service>`.

The SDK and the exporters are optional packages (`pip install
'tidal[tracing]'`): asked for and missing, the service refuses to start
with one line saying what to install.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

from tidal_bus import tracing

_INSTALL = "pip install 'tidal[tracing]'"
_OTLP = {  # protocol -> (module, package)
    "http/protobuf": ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                      "opentelemetry-exporter-otlp-proto-http"),
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "opentelemetry-exporter-otlp-proto-grpc"),
}


class TracingConfigError(ValueError):
    """The OTEL_… settings ask for what cannot be had; the message is one line."""


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The span exporters the environment asks for; [] means spans off."""
    named = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not named:
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        return ["otlp"] if endpoint else []
    names = [name.strip() for name in named.split(",") if name.strip()]
    unknown = [name for name in names if name not in ("otlp", "console", "none")]
    if unknown:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER: unknown exporter {unknown[0]!r} "
                                 "(give otlp, console or none)")
    return [name for name in names if name != "none"]


def configure_tracing(service: str, environ: Mapping[str, str] | None = None) -> Any:
    """Install a tracer provider for the bus's spans as the environment
    asks; the provider (to shut down at exit, which flushes the spans), or
    None when spans stay off. TracingConfigError when it cannot be done."""
    environ = os.environ if environ is None else environ
    names = exporter_names(environ)
    if not names:
        return None
    sdk_trace = _module("opentelemetry.sdk.trace", "opentelemetry-sdk")
    export = _module("opentelemetry.sdk.trace.export", "opentelemetry-sdk")
    resources = _module("opentelemetry.sdk.resources", "opentelemetry-sdk")
    exporters = [_exporter(name, environ, export) for name in names]
    name = environ.get("OTEL_SERVICE_NAME", "").strip() or f"tidal-{service}"
    provider = sdk_trace.TracerProvider(resource=resources.Resource.create({"service.name": name}))
    for exporter in exporters:
        provider.add_span_processor(export.BatchSpanProcessor(exporter))
    tracing.use(provider)
    return provider


def _exporter(name: str, environ: Mapping[str, str], export: Any) -> Any:
    if name == "console":
        return export.ConsoleSpanExporter()
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol not in _OTLP:
        raise TracingConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported "
                                 "(give http/protobuf or grpc)")
    module, package = _OTLP[protocol]
    return _module(module, package).OTLPSpanExporter()


def _module(name: str, package: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        raise TracingConfigError(f"tracing is asked for (OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT) but "
                                 f"the package {package} is not installed: {_INSTALL}") from None
