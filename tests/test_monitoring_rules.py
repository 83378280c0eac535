"""k8s/monitoring: the PrometheusRule's alerts name only metrics that running
services export (placement, the bridge and the webhook are started over a
real NATS server and scraped over HTTP), and the Grafana sidecar's
ConfigMap holds k8s/dashboards/tidal.json exactly.

    python tests/test_monitoring_rules.py --write   # writes the ConfigMap again from the JSON
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import start_service, stop_service
from metrics_scrape import SERIES_SUFFIXES, scrape_typed
from test_bridge_service import fake, running, settings  # noqa: F401 (a fixture)
from test_manifests import K8S_VERSION, NAMESPACE, build
from tidal_cli.webhook_tls import make_webhook_tls
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_webhook import WebhookService, WebhookSettings

ROOT = Path(__file__).resolve().parents[1]
MONITORING = ROOT / "k8s" / "monitoring"
DASHBOARD = ROOT / "k8s" / "dashboards" / "tidal.json"
CONFIGMAP = MONITORING / "dashboard-configmap.yaml"
RULES = MONITORING / "prometheusrule.yaml"
# The alerts issue 55 asks for, and the metric each must read.
REQUIRED = {"TidalPendingPodsStuck": "scheduler_pending_pods", "TidalDecisionsNotBound": "tidal_bridge_binds_total",
            "TidalConsumerLag": "tidal_consumer_lag", "TidalDeadLetters": "tidal_dead_letters_total",
            "TidalNodeAgentSilent": "tidal_scheduler_stale_nodes", "TidalWebhookErrors": "tidal_webhook_reviews_total"}

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are
    not a function called, a keyword, a label inside `{…}` or a grouping
    clause, a string, a number or a range."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values) first: they may hold anything
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        name, rest = match.group(), text[match.end():].lstrip()
        if name.lower() in KEYWORDS or rest.startswith("("):
            continue
        names.add(name)
    return names


def render_configmap(dashboard: str) -> str:
    """The ConfigMap Grafana's sidecar loads, holding `dashboard` as is."""
    body = "".join(f"    {line}\n" if line else "\n" for line in dashboard.splitlines())
    return ("# Written from k8s/dashboards/tidal.json by `python tests/test_monitoring_rules.py --write`:\n"
            "# edit the JSON, then write this again (the test fails while they differ).\n"
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tidal-dashboard\n  labels:\n"
            '    app.kubernetes.io/part-of: tidal\n    grafana_dashboard: "1"\n'
            "data:\n  tidal.json: |\n" + body)


def _rules() -> list[dict]:
    (rule,) = [d for d in yaml.safe_load_all(RULES.read_text()) if d]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_metric_names_are_read_from_promql():
    expr = ('(sum by (cluster) (scheduler_pending_pods{queue!="gated", x="a{b}"}) > 0) unless on (cluster) '
            '(sum by (cluster) (increase(tidal_bridge_binds_total{result="bound"}[15m])) > 0.5 * foo:bar) or vector(0)')
    assert metric_names(expr) == {"scheduler_pending_pods", "tidal_bridge_binds_total", "foo:bar"}


def test_every_alert_is_complete_and_the_required_ones_are_there():
    rules = _rules()
    by_name = {r["alert"]: r for r in rules}
    assert len(by_name) == len(rules), "alert names repeat"
    for name, metric in REQUIRED.items():
        assert metric in metric_names(by_name[name]["expr"]), f"{name} does not read {metric}"
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"]
        assert rule["expr"].count("(") == rule["expr"].count(")") and metric_names(rule["expr"])
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s"))


def test_the_dashboard_configmap_is_the_dashboard():
    dashboard = DASHBOARD.read_text()
    assert CONFIGMAP.read_text() == render_configmap(dashboard), \
        "k8s/monitoring/dashboard-configmap.yaml differs from k8s/dashboards/tidal.json: " \
        "run `python tests/test_monitoring_rules.py --write`"
    # rendered as `kubectl apply -k k8s/monitoring` would (test_manifests' loader)
    objects = {obj["kind"]: obj for obj in build(MONITORING)}
    assert sorted(objects) == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]
    assert {obj["metadata"]["namespace"] for obj in objects.values()} == {NAMESPACE}
    configmap = objects["ConfigMap"]
    assert configmap["data"]["tidal.json"] == dashboard
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    kubernetes_validate.validate(configmap, K8S_VERSION, strict=True)  # the other two are the operator's kinds


def test_a_drifted_dashboard_is_caught():
    assert render_configmap(DASHBOARD.read_text().replace("Pending", "Waiting")) != CONFIGMAP.read_text()


def _series(families: dict[str, list], types: dict[str, str]) -> set[str]:
    """Every series name the scraped families export or would once labelled."""
    names = set()
    for family in families:
        kind = types.get(family, "gauge")
        names.add(family)
        names.update(family + suffix for suffix in SERIES_SUFFIXES.get(kind, ()))
    return names


async def _scraped(service) -> set[str]:
    return _series(*await scrape_typed(service))


@pytest.fixture
def tls(tmp_path):
    made = make_webhook_tls(["localhost"], ["127.0.0.1"])
    cert, key, _ = made.write(tmp_path / "tls")
    return cert, key


async def test_every_alert_names_metrics_running_services_export(nats_server, namespace, fake, tls):  # noqa: F811
    http = dict(http_port=0, http_host="127.0.0.1", cluster="c1")
    exported: set[str] = set()
    placement = PlacementService(PlacementSettings(bus_url=nats_server.url, namespace=namespace, **http))
    cert, key = tls
    webhook = WebhookService(WebhookSettings(bus_url=nats_server.url, namespace=namespace, https_host="127.0.0.1",
                                             https_port=0, tls_cert_file=cert, tls_key_file=key, **http))
    for service in (placement, webhook):
        task = await start_service(service)
        try:
            exported |= await _scraped(service)
        finally:
            await stop_service(service, task)
    async with running(settings(nats_server, namespace, fake, watch_tenants=False)) as (bridge,):
        exported |= await _scraped(bridge)
    missing = {(rule["alert"], name) for rule in _rules() for name in metric_names(rule["expr"])
               if name not in exported}
    assert not missing, f"alerts on metrics no running service exports: {sorted(missing)}"
    assert "tidal_no_such_metric" not in exported


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    CONFIGMAP.write_text(render_configmap(DASHBOARD.read_text()))
