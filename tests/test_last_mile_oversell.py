"""Oversold room reaches the kubelet only through the node's status: the
whole path of `tidal simulate` (an embedded NATS server, placement, scoring,
oversell, remediation and the admission webhook as their own processes, the
real bridge, the stand-in API server calling the webhook over HTTPS, the
kubelet stand-ins admitting by `status.allocatable`).

One node of 8 CPUs runs a pod asking 6; a second pod asking 4 comes later.
Only oversold room (the pods use a tenth of what they ask) fits it. With
the webhook, the node's status carries oversell's figure, placement books it
and the kubelet admits the pod; with the webhook stopped (not started) the
status keeps the kubelet's 8 CPUs, so placement leaves the pod pending, and
in neither run does a pod fail kubelet admission."""

from __future__ import annotations

import json

import pytest

from tidal_cli import main as cli

SCENARIO = """
name: oversold
tick_s: 10
duration_s: 120
nodes: [{name: n1, numa_cpus: [8], memory_mib: 65536, exclusive_cpus: false}]
pods:
  - {name: base, tenant: t, cpu_milli: 6000, usage: {cpu: {kind: constant, level: 0.1}}}
  - {name: extra, tenant: t, cpu_milli: 4000, arrive_s: 70, usage: {cpu: {kind: constant, level: 0.1}}}
expect:
  - {kind: placed, pod: t/extra, node: n1}
"""
# oversell at once: no warm-up, the whole rise in one update (its defaults take 10 minutes and more)
OVERSELL_AT_ONCE = ["--env", "TIDAL_OVERSELL_WARMUP_S=0", "--env", "TIDAL_OVERSELL_MAX_RISE_PER_UPDATE=1"]
WITHOUT_WEBHOOK = "placement,scoring,oversell,remediation"


def simulate(tmp_path, monkeypatch, *extra: str) -> tuple[int, dict]:
    # the kubelets write an unchanged status each minute, not five (nodeStatusReportFrequency): the first
    # write with oversell's figure to fill in comes at 60 s
    monkeypatch.setenv("TIDAL_SIMULATOR_NODE_STATUS_REPORT_S", "60")
    scenario = tmp_path / "oversold.yaml"
    scenario.write_text(SCENARIO)
    report = tmp_path / "report.json"
    code = cli.main(["simulate", "--scenario", str(scenario), "--data-dir", str(tmp_path / "run"),
                     "--report", str(report), *OVERSELL_AT_ONCE, *extra])
    return code, json.loads(report.read_text())


@pytest.mark.parametrize("webhook", [True, False], ids=["with-webhook", "webhook-stopped"])
def test_oversold_room_is_used_exactly_when_the_node_status_carries_it(tmp_path, monkeypatch, webhook):
    code, report = simulate(tmp_path, monkeypatch, *([] if webhook else ["--services", WITHOUT_WEBHOOK]))
    pods = report["pods"]
    assert report["invariants"]["violations"] == 0, report["invariants"]
    assert report["kubelets"]["admission_failures"] == 0, report["kubelets"]
    assert pods["failed"] == 0
    if webhook:
        assert code == 0 and (pods["running"], pods["pending"]) == (2, 0), pods
        assert report["expectations"][0]["ok"], report["expectations"]
    else:
        # the only expectation (extra is placed) is not met: exit 1, and the pod waits for CPU
        assert code == 1 and (pods["running"], pods["pending"]) == (1, 1), pods
        assert pods["pending_by_reason"] == {"cpu": 1}
