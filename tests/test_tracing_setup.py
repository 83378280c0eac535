"""Spans are off unless OpenTelemetry's standard variables ask for them;
asked for and impossible (an exporter's package missing, an unknown
exporter), a service refuses to start with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, patience
from tidal_bus import tracing
from tidal_runtime.tracing_setup import TracingConfigError, configure_tracing, exporter_names

HTTP_EXPORTER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"


@pytest.mark.parametrize("environ, names", [
    ({}, []),
    ({"OTEL_TRACES_EXPORTER": "none"}, []),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": " Console "}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
])
def test_which_exporters_the_environment_asks_for(environ, names):
    assert exporter_names(environ) == names


def test_an_unknown_exporter_is_refused():
    with pytest.raises(TracingConfigError, match="unknown exporter 'jaeger'"):
        exporter_names({"OTEL_TRACES_EXPORTER": "jaeger"})
    with pytest.raises(TracingConfigError, match="'http/json' is not supported"):
        configure_tracing("placement", {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_off_by_default_nothing_is_installed():
    assert configure_tracing("placement", {}) is None
    assert not tracing.spans_on()


def test_a_missing_otlp_exporter_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, HTTP_EXPORTER, None)  # as when the package is not installed
    with pytest.raises(TracingConfigError) as caught:
        configure_tracing("placement", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    message = str(caught.value)
    assert "opentelemetry-exporter-otlp-proto-http" in message and "pip install" in message
    assert "\n" not in message
    assert not tracing.spans_on()


CONSOLE_RUN = """
from builders import pod
from tidal_bus.tracing import handler_span, publishing
from tidal_runtime.tracing_setup import configure_tracing
from tidal_schemas import make_envelope

provider = configure_tracing("placement")
envelope = make_envelope(pod("p1"), cluster="c1", source="bridge")
handler_span("placement", "placement", envelope, None).end("ok")
with publishing("placement", envelope, None):
    pass
provider.shutdown()
"""


def test_the_console_exporter_writes_the_bus_spans_under_the_service_name():
    result = subprocess.run([sys.executable, "-c", CONSOLE_RUN], capture_output=True, text=True, timeout=patience(60),
                            cwd=ROOT, env={**os.environ, "OTEL_TRACES_EXPORTER": "console",
                                           "OTEL_SERVICE_NAME": "sched-a", "PYTHONPATH": os.pathsep.join(
                                               [str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])})
    assert result.returncode == 0, result.stderr
    decoder, spans, at = json.JSONDecoder(), [], result.stdout.find("{")
    while at >= 0:
        span, end = decoder.raw_decode(result.stdout, at)
        spans.append(span)
        at = result.stdout.find("{", end)
    assert [s["name"] for s in spans] == ["placement pod.lifecycle", "placement publish pod.lifecycle"]
    assert {s["resource"]["attributes"]["service.name"] for s in spans} == {"sched-a"}
    assert spans[0]["kind"] == "SpanKind.CONSUMER" and spans[1]["kind"] == "SpanKind.PRODUCER"
    assert spans[0]["attributes"]["tidal.key"] == "default/p1" and spans[0]["attributes"]["tidal.outcome"] == "ok"
    assert spans[0]["parent_id"] is None and spans[1]["parent_id"] is None  # no cause: each starts a trace


def test_a_service_asked_for_an_exporter_it_lacks_does_not_start(tmp_path):
    script = (f"import sys; sys.modules[{HTTP_EXPORTER!r}] = None\n"
              "from tidal_cli.main import main\n"
              "sys.exit(main(['run', 'scoring']))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=patience(60), cwd=ROOT,
                            env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
                                 "TIDAL_BUS_URL": "nats://127.0.0.1:1"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "opentelemetry-exporter-otlp-proto-http" in json.loads(lines[0])["msg"]
