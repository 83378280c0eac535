"""The Grafana dashboard and the ServiceMonitor: every metric a dashboard
query names is exported by a service of the stack, and the ServiceMonitor
selects every service's metrics port. (The PrometheusRule and the
dashboard's ConfigMap: test_monitoring_rules.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from metrics_scrape import series_names
from tidal_bridge.service import BridgeService
from tidal_bridge.settings import BridgeSettings
from tidal_oversell.service import OversellService
from tidal_oversell.settings import OversellSettings
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_remediation.service import RemediationService
from tidal_remediation.settings import RemediationSettings
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "k8s" / "dashboards" / "tidal.json"
# Tidal's metric names, and kube-scheduler's and client-go's that Tidal exports; PromQL functions and labels
# never start so
METRIC = re.compile(r"\b(?:tidal|scheduler|rest_client)_[a-zA-Z0-9_:]+")
SERVICES = [(PlacementService, PlacementSettings), (ScoringService, ScoringSettings),
            (OversellService, OversellSettings), (RemediationService, RemediationSettings),
            (BridgeService, BridgeSettings)]


def _expressions(dashboard: dict) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and templating queries."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "query"]
    return exprs


def _exported() -> set[str]:
    """The series names the services register (built, not run: the same
    registry their /metrics serves; test_metrics_endpoint scrapes it live)."""
    names: set[str] = set()
    for service_class, settings_class in SERVICES:
        service = service_class(settings_class(bus_url="nats://127.0.0.1:1", namespace="dash", cluster="c1"))
        names |= series_names(service.metrics.registry)
    return names


def test_every_dashboard_query_names_an_exported_metric():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = _expressions(dashboard)
    assert len(exprs) >= 10
    exported = _exported()
    missing = {(name, expr) for expr in exprs for name in METRIC.findall(expr) if name not in exported}
    assert not missing, f"queried but exported by no service: {sorted(missing)}"
    for expr in exprs:
        assert METRIC.search(expr), f"a query names no Tidal metric: {expr}"


def test_dashboard_covers_the_scheduling_metrics():
    queried = {name for expr in _expressions(json.loads(DASHBOARD.read_text())) for name in METRIC.findall(expr)}
    assert {"tidal_scheduler_pending_pods", "scheduler_pending_pods", "scheduler_schedule_attempts_total",
            "scheduler_scheduling_attempt_duration_seconds_bucket",
            "tidal_scheduler_pod_scheduling_duration_seconds_bucket", "tidal_scheduler_placements_total",
            "tidal_gpu_allocated_milli", "tidal_gpu_fragmented_milli", "tidal_fair_share_score",
            "tidal_node_actions_total", "tidal_oversell_allocatable", "tidal_build_info"} <= queried


def test_dashboard_has_the_bridge_panels():
    queried = {name for expr in _expressions(json.loads(DASHBOARD.read_text())) for name in METRIC.findall(expr)}
    assert {"rest_client_request_duration_seconds_bucket", "rest_client_requests_total", "tidal_bridge_binds_total",
            "tidal_bridge_binds_in_flight", "tidal_bridge_watch_restarts_total", "tidal_bridge_relists_total"} <= queried


def test_the_check_catches_an_unknown_metric():
    assert "tidal_no_such_metric" not in _exported()


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("workload", ["placement", "scoring", "oversell", "remediation", "topology", "bridge"])
def test_service_monitor_selects_each_services_metrics_port(workload: str):
    (monitor,) = _docs(ROOT / "k8s" / "monitoring" / "servicemonitor.yaml")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "ServiceMonitor"
    kustomization = yaml.safe_load((ROOT / "k8s" / "monitoring" / "kustomization.yaml").read_text())
    assert "servicemonitor.yaml" in kustomization["resources"]
    # the node agent has a namespace of its own (k8s/base/node), every other service the base's
    where = ROOT / "k8s" / "base" / ("node" if workload == "topology" else "")
    namespace = yaml.safe_load((where / "kustomization.yaml").read_text()).get("namespace", "tidal-system")
    assert kustomization["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    assert namespace in monitor["spec"]["namespaceSelector"]["matchNames"]
    (service,) = [d for d in _docs(where / f"{workload}.yaml") if d["kind"] == "Service"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])
