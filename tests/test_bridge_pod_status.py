"""The bridge's pod status reporter against the simulated API server over
kubernetes-asyncio, case by case: the condition written once per message,
one event per message counted on repeats, an expired event started anew,
a pod gone or bound left alone, a pod of the same name counted anew, and
an API server that fails costing a log line, not the decision stream."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest
from kubernetes_asyncio import client

from fake_kube_api import FakeKubeApi
from tidal_bridge.event_budget import EventBudget
from tidal_bridge.kube import Kube
from tidal_bridge.pod_status import PodStatusReporter
from tidal_schemas import PlacementDecision
from tidal_simulator.kube_api import write_kubeconfig
from conftest import patience


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def setup():
    async with FakeKubeApi() as server:
        kube = Kube(client.ApiClient(client.Configuration(host=server.url)))
        clock = Clock()
        try:
            yield server, PodStatusReporter(kube, budget=EventBudget(burst=10, refill_s=60), clock=clock), clock
        finally:
            await kube.close()


def pending(name: str = "p", reason: str = "0/2 nodes fit: 2 cpu", filtered=None, uid: str = "") -> PlacementDecision:
    return PlacementDecision(decision_id=f"d-{reason}", namespace="default", name=name, outcome="pending",
                             reason=reason, filtered={"cpu": 2} if filtered is None else filtered, nodes=2, uid=uid)


def condition(server: FakeKubeApi, name: str = "p") -> dict | None:
    pod = server.pod("default", name)
    return next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)


def events(server: FakeKubeApi, name: str = "p") -> list[dict]:
    return sorted((e for e in server.events.values() if e["involvedObject"]["name"] == name),
                  key=lambda e: e["metadata"]["name"])


def writes(server: FakeKubeApi, method: str, part: str) -> int:
    return sum(1 for m, path, _ in server.requests if m == method and part in path)


async def test_one_condition_and_one_counted_event_per_message(setup):
    server, reporter, clock = setup
    uid = server.add_pod("p")["metadata"]["uid"]
    for _ in range(3):
        await reporter.unschedulable(pending(uid=uid))
        clock.now += 1
    assert condition(server)["message"] == "0/2 nodes are available: 2 Insufficient cpu."
    assert condition(server)["lastTransitionTime"] == "2027-01-15T08:00:00Z"
    assert writes(server, "PATCH", "/pods/p/status") == 1  # the same message: written once
    (event,) = events(server)
    assert (event["count"], event["firstTimestamp"], event["lastTimestamp"]) == \
        (3, "2027-01-15T08:00:00Z", "2027-01-15T08:00:02Z")
    assert event["involvedObject"]["uid"] == uid and event["reason"] == "FailedScheduling"
    # another message: the condition follows (its transition time stays), a second event object
    await reporter.unschedulable(pending(reason="0/2 nodes fit: 2 memory", filtered={"memory": 2}, uid=uid))
    assert condition(server)["message"] == "0/2 nodes are available: 2 Insufficient memory."
    assert condition(server)["lastTransitionTime"] == "2027-01-15T08:00:00Z"
    assert [e["count"] for e in events(server)] == [3, 1]


async def test_an_expired_event_is_started_anew(setup):
    server, reporter, _ = setup
    server.add_pod("p")
    await reporter.unschedulable(pending())
    server.events.clear()  # the API server's event TTL
    await reporter.unschedulable(pending())
    await reporter.unschedulable(pending())
    assert [e["count"] for e in events(server)] == [2]


async def test_a_pod_gone_or_bound_is_left_alone(setup):
    server, reporter, _ = setup
    await reporter.unschedulable(pending("gone"))
    assert server.events == {}  # 404 on the condition: no event about a pod that is not there
    server.add_pod("p")
    reporter.bound("default", "p")
    await reporter.unschedulable(pending())  # a decision read after the binding
    assert condition(server) is None and server.events == {}


async def test_a_new_pod_of_the_same_name_counts_anew(setup):
    server, reporter, _ = setup
    server.add_pod("p")
    await reporter.unschedulable(pending())
    await reporter.unschedulable(pending())
    server.delete_pod("default", "p")
    reporter.forget("default", "p")  # the bridge's watch saw the deletion
    server.add_pod("p")
    await reporter.unschedulable(pending())
    assert [e["count"] for e in events(server)] == [2, 1]
    assert condition(server)["message"] == "0/2 nodes are available: 2 Insufficient cpu."


async def test_counts_forgotten_by_pod_also_past_the_kept_limit(setup, monkeypatch):
    # forget finds a pod's counts by pod (not a scan of every count), and the index stays as bounded
    server, reporter, _ = setup
    monkeypatch.setattr("tidal_bridge.pod_status.COUNTS_KEPT", 2)
    for name in ("a", "b", "c"):
        server.add_pod(name)
        await reporter.unschedulable(pending(name))
    reporter.forget("default", "c")
    await reporter.unschedulable(pending("b"))  # b's count kept: the same event, counted again
    await reporter.unschedulable(pending("a"))  # a's count was dropped past the limit: a new event
    assert sorted(e["count"] for e in events(server, "a")) == [1, 1]
    assert [e["count"] for e in events(server, "b")] == [2]
    assert set(reporter._counted) == {"default/a", "default/b"}  # c forgotten, nothing left behind


async def test_the_budget_bounds_event_writes_not_the_condition(setup):
    server, reporter, clock = setup
    reporter.budget = EventBudget(burst=2, refill_s=60)
    server.add_pod("p")
    for i in range(6):
        await reporter.unschedulable(pending(reason=f"0/2 nodes fit: 2 cpu ({i})",
                                             filtered={"cpu": 2} if i % 2 else {"memory": 2}))
        clock.now += 1
    assert writes(server, "PATCH", "/pods/p/status") == 6  # every change of message is on the pod
    assert condition(server)["message"] == "0/2 nodes are available: 2 Insufficient cpu."
    assert sum(e["count"] for e in events(server)) == 2
    clock.now += 60  # one token back
    await reporter.unschedulable(pending())
    assert sum(e["count"] for e in events(server)) == 3


async def test_an_api_server_that_fails_costs_a_log_line(setup, caplog):
    server, reporter, _ = setup
    server.add_pod("p")
    await reporter.unschedulable(pending())
    server.fail("PATCH", "/events/", 500, times=1)
    await reporter.unschedulable(pending())  # the count is not lost: the next repeat lands on the same object
    await reporter.unschedulable(pending())
    assert [e["count"] for e in events(server)] == [2]
    assert "not recorded" in caplog.text


async def test_kubectl_describe_shows_the_condition_and_the_counted_event(setup, tmp_path):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is missing: Debian's kubernetes-client provides it (`make test` installs it)")
    server, reporter, clock = setup
    uid = server.add_pod("p", cpu="16")["metadata"]["uid"]
    decision = pending(reason="0/3 nodes fit: 2 cpu, 1 stop-scheduling taint",
                       filtered={"cpu": 2, "stop-scheduling taint": 1}, uid=uid)
    for _ in range(3):
        await reporter.unschedulable(decision.model_copy(update={"nodes": 3}))
        clock.now += 1
    config = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    run = await asyncio.to_thread(subprocess.run, [kubectl, "--kubeconfig", str(config), "describe", "pod", "p"],
                                  capture_output=True, text=True, timeout=patience(60),
                                  env={"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert run.returncode == 0, run.stderr
    lines = [" ".join(line.split()) for line in run.stdout.splitlines()]
    assert "PodScheduled False" in lines
    (event,) = [line for line in lines if line.startswith("Warning FailedScheduling")]
    # the times are the fake clock's (2027), so kubectl shows an age below zero or in years: not asserted
    assert "(x3 over" in event and event.endswith(
        "tidal-bridge 0/3 nodes are available: 1 node(s) had untolerated taint {tidal.dev/stop-scheduling: }, "
        "2 Insufficient cpu.")
