"""`tidal explain --kubeconfig`: the answer from the pod itself, as
`kubectl describe pod` reads it, against the stand-in API server (the real
REST protocol) through a kubeconfig. The bridge's own code writes what is
read: its Binder binds the pod with the decision's annotations, its event
helper posts the `Scheduled` and `FailedScheduling` Events, its status
patch sets `PodScheduled=False`. A pending pod carries no decision: with a
bus given, its latest decision comes from the log (NATS here)."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from kubernetes_asyncio import client

from conftest import make_bus
from tidal_bridge.binder import Binder
from tidal_bridge.kube import Kube
from tidal_bridge.objects import SCHEDULED
from tidal_bridge.pod_status import create_pod_event
from tidal_bridge.unschedulable import FAILED_SCHEDULING, scheduled_condition, status_patch
from tidal_cli import main as cli
from tidal_schemas import GpuShare, PlacementDecision, PlacementDecisions
from tidal_simulator.kube_api import KubeApiServer, write_kubeconfig

WHY = "0/1 nodes are available: 1 Insufficient cpu."


def placed() -> PlacementDecision:
    return PlacementDecision(decision_id="d-web", namespace="ns", name="web", outcome="placed", node="n1",
                             numa_cpus={0: 2, 1: 2}, gpus=[GpuShare(gpu="gpu-0", milli=500, model="A100")])


async def cluster(api: KubeApiServer) -> None:
    """ns/web bound by the bridge's Binder, ns/queued unschedulable, one
    Event of another component on each."""
    api.add_node("n1", cpu="16")
    api.add_pod("web", "ns")
    api.add_pod("queued", "ns", cpu="64")
    kube = Kube(client.ApiClient(client.Configuration(host=api.url)))
    try:
        decision = placed()
        outcome = await Binder(kube).bind(decision)
        assert outcome.ok, outcome.reason
        await create_pod_event(kube, outcome.pod, SCHEDULED, "Successfully assigned ns/web to n1 (decision d-web)",
                               "Normal")
        queued = await kube.get_pod("ns", "queued")
        await kube.patch_pod_status("ns", "queued", status_patch(scheduled_condition(WHY)))
        await create_pod_event(kube, queued, FAILED_SCHEDULING, WHY)
        other = {"metadata": {"name": "web.other", "namespace": "ns"}, "reason": "Pulled", "type": "Normal",
                 "message": "image pulled", "involvedObject": {"kind": "Pod", "name": "web", "namespace": "ns"},
                 "source": {"component": "kubelet"}}
        await kube.create_event("ns", other)
    finally:
        await kube.close()


def explain(*argv: str) -> tuple[int, str, str]:
    """The command in a worker thread (it runs its own event loop), with its output."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["explain", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def kubeconfig(tmp_path, monkeypatch):
    """(the stand-in API server's kubeconfig, a function running the command against it)."""
    monkeypatch.delenv("TIDAL_BUS_URL", raising=False)
    loop = asyncio.new_event_loop()
    api = KubeApiServer()
    loop.run_until_complete(api.start())
    loop.run_until_complete(cluster(api))
    path = write_kubeconfig(tmp_path / "kubeconfig", api.url)

    def run(*argv: str) -> tuple[int, str, str]:
        # the server answers on this loop while the command runs in a thread
        return loop.run_until_complete(asyncio.to_thread(explain, *argv))

    yield str(path), run
    loop.run_until_complete(api.stop())
    loop.close()


def test_a_bound_pod_is_explained_by_the_decision_written_on_it(kubeconfig):
    path, run = kubeconfig
    code, out, err = run("ns/web", "--kubeconfig", path, "-o", "json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["source"] == "api" and shown["log"] is None
    pod = shown["pod"]
    assert pod["node"] == "n1" and pod["decision_problem"] is None
    assert pod["decision"] == {"decision_id": "d-web", "numa_cpus": {"0": 2, "1": 2},
                               "gpus": [{"gpu": "gpu-0", "milli": 500, "model": "A100"}]}
    # Tidal's Events only (the kubelet's is left out), as kubectl describe lists them
    assert [(e["type"], e["reason"]) for e in pod["events"]] == [("Normal", SCHEDULED)]
    assert "decision d-web" in pod["events"][0]["message"]
    code, out, _ = run("ns/web", "--kubeconfig", path, "-o", "yaml")
    assert code == 0 and yaml.safe_load(out) == shown
    code, out, _ = run("ns/web", "--kubeconfig", path)
    assert out.splitlines()[:3] == ["pod ns/web: BOUND on n1  (decision d-web, written on the pod)",
                                    "  exclusive CPUs per NUMA node: numa0=2, numa1=2",
                                    "  GPUs: gpu-0 (A100, 500m)"]
    assert "Normal  Scheduled  Successfully assigned ns/web to n1 (decision d-web)" in out


def test_a_pending_pod_says_so_and_why(kubeconfig):
    path, run = kubeconfig
    code, out, err = run("ns/queued", "--from", "api", "--kubeconfig", path, "-o", "json")
    assert code == 0, err
    pod = json.loads(out)["pod"]
    assert pod["node"] is None and pod["decision"] is None
    assert pod["scheduled"]["status"] == "False" and pod["scheduled"]["message"] == WHY
    assert [e["reason"] for e in pod["events"]] == [FAILED_SCHEDULING]
    code, out, _ = run("ns/queued", "--kubeconfig", path)
    assert out.startswith("pod ns/queued: PENDING  (no decision written on the pod; scheduler tidal)")
    assert f"  why: {WHY}" in out and "give --bus" in out


def test_a_pending_pod_falls_back_to_the_log_when_a_bus_is_given(kubeconfig, nats_server, namespace):
    path, run = kubeconfig

    async def publish() -> None:
        async with make_bus(nats_server.url, namespace, cluster="c1") as bus:
            await bus.ensure_streams()
            await bus.publish(PlacementDecisions.of(PlacementDecision(
                decision_id="d-queued", namespace="ns", name="queued", outcome="pending", reason=WHY,
                filtered={"cpu": 1}, queue_position=3)))

    asyncio.run(publish())
    bus = ["--bus", nats_server.url, "--namespace", namespace, "--cluster", "c1"]
    code, out, err = run("ns/queued", "--kubeconfig", path, *bus, "-o", "json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["pod"]["decision"] is None
    assert shown["log"]["decision"]["decision_id"] == "d-queued" and shown["log"]["decision"]["queue_position"] == 3
    code, out, _ = run("ns/queued", "--kubeconfig", path, *bus)
    assert "from the decision log:\npod ns/queued: PENDING  (decision d-queued" in out
    assert "  queue position: 3" in out


def test_a_pod_not_there_is_one_line(kubeconfig):
    path, run = kubeconfig
    code, out, err = run("ns/nobody", "--kubeconfig", path)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "pod ns/nobody not found on the API server 127.0.0.1:" in err
