"""Safe by default: eviction, freezing and migration start dry-run — decided,
counted and published marked `dry_run`, carried out by nobody — until an
operator enables them one by one; the stop-scheduling taint (and a thaw)
acts from the start. The services are driven through their own entry
points on a captured bus (no broker: what they publish is kept)."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from builders import pod
from test_remediation_state import be, ls, metrics, topology
from tidal_bridge.actuator import carry_out
from tidal_cli.config_cmd import configuration
from tidal_cli.simulate_cmd import ACTIONS_ENABLED
from tidal_oversell import OversellService, OversellSettings
from tidal_oversell.pods_by_node import HeldPod
from tidal_oversell.pool_metrics import ACTION_REASONS as OVERSELL_REASONS
from tidal_remediation import RemediationService, RemediationSettings
from tidal_remediation.service import ACTION_REASONS as REMEDIATION_REASONS
from tidal_runtime.configuration import load_settings
from tidal_schemas import NodeAction, NodeMetrics, NodeTopology, PodUsage, Resources, make_envelope
from tidal_simulator.replay_actions import LIVE, CapturedOutputs, replay_settings
from tidal_topology.agent_core import AgentCore

ROOT = Path(__file__).resolve().parents[1]
COMMON = dict(bus_url="nats://127.0.0.1:1", cluster="c1", http_port=0, http_host="127.0.0.1")
NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def no_tidal_environment(monkeypatch):
    for name in list(os.environ):
        if name.upper().startswith("TIDAL_"):
            monkeypatch.delenv(name)


def test_the_default_configuration_evicts_freezes_and_moves_nothing():
    defaults = configuration().defaults()
    assert (defaults["oversell"]["evict"], defaults["oversell"]["taint"]) == ("dry-run", "enabled")
    assert (defaults["remediation"]["freeze"], defaults["remediation"]["migrate"]) == ("dry-run", "dry-run")
    assert OversellSettings().dry_run_kinds() == {"evict"}
    assert RemediationSettings().dry_run_kinds() == {"freeze", "set-cpuset"}


def test_the_shipped_config_map_keeps_the_safe_defaults(tmp_path):
    documents = yaml.safe_load_all((ROOT / "k8s" / "base" / "config" / "configmap.yaml").read_text())
    (config,) = [d for d in documents if d["metadata"]["name"] == "tidal-config"]
    path = tmp_path / "tidal.yaml"
    path.write_text(config["data"]["tidal.yaml"])
    assert load_settings(OversellSettings, path).dry_run_kinds() == {"evict"}
    assert load_settings(RemediationSettings, path).dry_run_kinds() == {"freeze", "set-cpuset"}


@pytest.mark.parametrize("variable, value, oversell, remediation", [
    ("TIDAL_OVERSELL_EVICT", "enabled", set(), {"freeze", "set-cpuset"}),
    ("TIDAL_REMEDIATION_FREEZE", "enabled", {"evict"}, {"set-cpuset"}),
    ("TIDAL_REMEDIATION_MIGRATE", "enabled", {"evict"}, {"freeze"}),
    ("TIDAL_OVERSELL_TAINT", "dry-run", {"evict", "taint", "untaint"}, {"freeze", "set-cpuset"}),
    # deprecated for one release: every action of the service dry-run, whatever its switches say
    ("TIDAL_OVERSELL_DRY_RUN", "true", {"evict", "taint", "untaint"}, {"freeze", "set-cpuset"}),
    ("TIDAL_REMEDIATION_DRY_RUN", "true", {"evict"}, {"freeze", "set-cpuset", "thaw"}),
])
def test_one_switch_changes_that_action_only(monkeypatch, variable, value, oversell, remediation):
    monkeypatch.setenv(variable, value)
    assert OversellSettings().dry_run_kinds() == oversell
    assert RemediationSettings().dry_run_kinds() == remediation


def test_the_file_enables_actions_and_the_environment_overrides_it(monkeypatch):
    path = ROOT / "examples" / "demo" / "actions.yaml"
    assert load_settings(OversellSettings, path).dry_run_kinds() == set()
    assert load_settings(RemediationSettings, path).dry_run_kinds() == set()
    monkeypatch.setenv("TIDAL_REMEDIATION_MIGRATE", "dry-run")
    assert load_settings(RemediationSettings, path).dry_run_kinds() == {"set-cpuset"}


def test_the_simulators_stack_enables_what_the_example_file_does(monkeypatch):
    for name, value in ACTIONS_ENABLED.items():
        monkeypatch.setenv(name, value)
    assert OversellSettings().dry_run_kinds() == RemediationSettings().dry_run_kinds() == set()


@pytest.mark.parametrize("stage, cls, recorded, expected", [
    # a journal of a release before the switches: it acted, unless dry_run said otherwise
    ("oversell", OversellSettings, {"dry_run": False}, set()),
    ("remediation", RemediationSettings, {"dry_run": False}, set()),
    ("remediation", RemediationSettings, {"dry_run": True}, {"freeze", "set-cpuset", "thaw"}),
    # a journal of this release names them
    ("oversell", OversellSettings, {"evict": "dry-run", "taint": "enabled", "dry_run": False}, {"evict"}),
])
def test_a_recording_replays_with_the_switches_it_ran_with(stage, cls, recorded, expected):
    assert cls(**COMMON, **replay_settings(stage, recorded)).dry_run_kinds() == expected


# -- published marked, counted, never carried out ------------------------------

async def _oversell_actions(**settings) -> tuple[dict[str, bool], OversellService]:
    """{kind: dry_run} of what oversell publishes for a node at 99 % memory
    (over stop 0.85: taint; over evict 0.95: evict the evictable pod)."""
    bus = CapturedOutputs("oversell-0")
    service = OversellService(OversellSettings(**COMMON, **settings), bus=bus)
    node = NodeTopology(node="n1", capacity=Resources(cpu_milli=8000, memory_mib=10000),
                        allocatable=Resources(cpu_milli=8000, memory_mib=10000))
    held = [HeldPod.of(pod("batch", phase="running", node="n1", qos="BE", evictable=True, memory_mib=4000,
                           created_at=NOW, started_at=NOW))]
    sample = NodeMetrics(node="n1", sampled_at=NOW, interval_s=10, memory_used_mib=9900, memory_total_mib=10000,
                         pods=[PodUsage(pod="default/batch", cpu_milli=100, memory_mib=4000, qos="BE")])
    await service.act(make_envelope(sample, cluster="c1", source="test"), node, held)
    return {e.payload.kind: e.payload.dry_run for e in bus.published}, service


async def _remediation_actions(pods, **settings) -> tuple[dict[str, bool], RemediationService]:
    """{kind: dry_run} of one remediation round on NUMA 0 at 0.95 (high 0.80)."""
    bus = CapturedOutputs("remediation-0")
    service = RemediationService(RemediationSettings(**COMMON, **settings), bus=bus)
    await service.on_topology(make_envelope(topology(2), cluster="c1", source="test"), LIVE)
    await service.decide(make_envelope(metrics([0.95, 0.1], pods), cluster="c1", source="test"))
    return {e.payload.kind: e.payload.dry_run for e in bus.published}, service


def _counted(service, kind: str, dry_run: bool) -> float:
    """tidal_node_actions_total of `kind` with that dry_run label."""
    reason = {**OVERSELL_REASONS, **REMEDIATION_REASONS}[kind]
    labels = {"cluster": "c1", "action": kind, "reason": reason, "dry_run": str(dry_run).lower()}
    return service.metrics.registry.get_sample_value("tidal_node_actions_total", labels) or 0


@pytest.mark.parametrize("settings, expected", [
    ({}, {"taint": False, "evict": True}),
    ({"evict": "enabled"}, {"taint": False, "evict": False}),
    ({"taint": "dry-run"}, {"taint": True, "evict": True}),
])
async def test_oversell_publishes_and_counts_a_dry_run_eviction(settings, expected):
    published, service = await _oversell_actions(**settings)
    assert published == expected
    for kind, dry_run in expected.items():
        assert _counted(service, kind, dry_run) == 1 and _counted(service, kind, not dry_run) == 0
    # a dry run is not remembered: no cool-down, no eviction awaited, decided again on the next sample
    assert service.log_of_actions.cooling_down("c1", "n1", NOW, 60) == (not expected["evict"])
    assert service.log_of_actions.eviction_pending("c1", "default/batch", NOW, 300) == (not expected["evict"])


@pytest.mark.parametrize("pods, settings, expected", [
    ([be("a", 2000), be("b", 1800)], {}, {"freeze": True}),
    ([be("a", 2000), be("b", 1800)], {"freeze": "enabled"}, {"freeze": False}),
    ([be("a", 2000), be("b", 1800)], {"migrate": "enabled"}, {"freeze": True}),
    # only latency-sensitive pods on the hot NUMA node: the round moves one
    ([ls("a", 400, (0,)), ls("b", 3400, (1, 2, 3))], {}, {"set-cpuset": True}),
    ([ls("a", 400, (0,)), ls("b", 3400, (1, 2, 3))], {"migrate": "enabled"}, {"set-cpuset": False}),
    ([ls("a", 400, (0,)), ls("b", 3400, (1, 2, 3))], {"freeze": "enabled"}, {"set-cpuset": True}),
])
async def test_remediation_publishes_and_counts_dry_run_freezes_and_moves(pods, settings, expected):
    published, service = await _remediation_actions(pods, **settings)
    assert published == expected
    for kind, dry_run in expected.items():
        assert _counted(service, kind, dry_run) >= 1 and _counted(service, kind, not dry_run) == 0
    memory = service.memory["c1"]
    assert bool(memory.actions.pending) == (not all(expected.values()))  # a dry run is not awaited


def _action(kind: str) -> NodeAction:
    move = {"target_numa": 1, "cpu_count": 1} if kind == "set-cpuset" else {}
    return NodeAction(action_id=f"{kind}-1", node="n1", kind=kind, pod="default/a", reason="test", dry_run=True,
                      requested_by="test", **move)


async def test_the_bridge_carries_out_no_dry_run_eviction():
    async def evict(action):
        raise AssertionError("a dry-run action reached the API server")

    outcome = await carry_out(evict, _action("evict"), age_s=0, max_age_s=60, attempt=1, limit=3)
    assert (outcome.status, outcome.reason) == ("skipped", "dry run: not executed")


@pytest.mark.parametrize("kind", ["freeze", "set-cpuset"])
async def test_the_node_agent_carries_out_no_dry_run_freeze_or_move(kind):
    # an agent with nothing behind it: touching its pods, cgroups or CPU books fails the test
    assert await AgentCore.execute(SimpleNamespace(), _action(kind)) == ("skipped", "dry run")
