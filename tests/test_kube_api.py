"""The simulated cluster's API server beyond what the bridge tests use:
pod creation and deletion, the kubelet's pods/status, events, discovery and
the server-side tables kubectl prints; `kubectl get pods -o wide` against a
running simulation (the real kubectl, Debian's kubernetes-client)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest

from sim_placement import placement as real_placement, waits_for_nodes
from tidal_cli import simulate_cmd
from tidal_simulator.kube_api import KubeApiServer
from tidal_simulator.run import simulate
from conftest import patience

KUBECTL = shutil.which("kubectl")
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


async def call(session: aiohttp.ClientSession, method: str, url: str, **kwargs):
    async with session.request(method, url, **kwargs) as response:
        return response.status, await response.json()


async def test_pods_are_created_deleted_and_their_status_patched_alone():
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        base = f"{api.url}/api/v1/namespaces/team/pods"
        code, created = await call(http, "POST", base, json={"metadata": {"name": "p"}, "spec": {"containers": []}})
        assert code == 201 and created["metadata"]["uid"] and created["status"]["phase"] == "Pending"
        assert created["spec"]["schedulerName"] == "default-scheduler"  # the API server's default
        code, again = await call(http, "POST", base, json={"metadata": {"name": "p"}})
        assert code == 409 and again["reason"] == "AlreadyExists"
        # pods/status writes the status only: a spec in the patch is ignored
        patch = {"status": {"phase": "Running"}, "spec": {"nodeName": "elsewhere"}}
        code, patched = await call(http, "PATCH", f"{base}/p/status", json=patch,
                                   headers={"Content-Type": "application/merge-patch+json"})
        assert code == 200 and patched["status"]["phase"] == "Running" and "nodeName" not in patched["spec"]
        assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
        code, gone = await call(http, "DELETE", f"{base}/p")
        assert code == 200 and api.pod("team", "p") is None
        assert (await call(http, "DELETE", f"{base}/p"))[0] == 404


async def test_discovery_and_tables_are_what_kubectl_reads():
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        api.add_node("n1", gpus=2)
        api.add_pod("placed", "team", node="n1", phase="Running")
        api.add_pod("waiting", "team")
        assert (await call(http, "GET", f"{api.url}/api"))[1]["versions"] == ["v1"]
        resources = {r["name"] for r in (await call(http, "GET", f"{api.url}/api/v1"))[1]["resources"]}
        assert {"pods", "pods/binding", "pods/eviction", "pods/status", "nodes", "events"} <= resources
        code, table = await call(http, "GET", f"{api.url}/api/v1/namespaces/team/pods", headers={"Accept": TABLE})
        assert code == 200 and table["kind"] == "Table"
        columns = [c["name"] for c in table["columnDefinitions"]]
        rows = {r["cells"][0]: dict(zip(columns, r["cells"])) for r in table["rows"]}
        assert (rows["placed"]["Status"], rows["placed"]["Node"], rows["placed"]["Ready"]) == ("Running", "n1", "1/1")
        assert (rows["waiting"]["Status"], rows["waiting"]["Node"]) == ("Pending", "<none>")
        assert all(r["object"]["metadata"]["namespace"] == "team" for r in table["rows"])
        _, plain = await call(http, "GET", f"{api.url}/api/v1/namespaces/team/pods")  # no Accept: a PodList
        assert plain["kind"] == "PodList" and len(plain["items"]) == 2


async def test_events_are_listed_per_namespace():
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        for ns in ("a", "b"):
            assert (await call(http, "POST", f"{api.url}/api/v1/namespaces/{ns}/events",
                               json={"reason": "Scheduled", "involvedObject": {"name": "p"}}))[0] == 201
        assert len((await call(http, "GET", f"{api.url}/api/v1/events"))[1]["items"]) == 2
        assert [e["metadata"]["namespace"] for e in
                (await call(http, "GET", f"{api.url}/api/v1/namespaces/a/events"))[1]["items"]] == ["a"]


def kubectl(config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"HOME": str(config.parent), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # its discovery cache there
    return subprocess.run([KUBECTL, "--kubeconfig", str(config), *args], capture_output=True, text=True, env=env,
                          timeout=patience(60))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    simulate_cmd.add(parser.add_subparsers())
    return parser.parse_args(["simulate", *argv])


async def test_kubectl_lists_a_running_simulations_placed_pods_with_their_nodes(nats_server, namespace, tmp_path):
    if KUBECTL is None:
        pytest.skip("kubectl is missing: Debian's kubernetes-client provides it (`make test` installs it)")
    scenario = tmp_path / "cluster.yaml"
    scenario.write_text("""
name: kubectl
tick_s: 10
duration_s: 30
nodes: [{name: cpu-a, numa_cpus: [4]}, {name: gpu-b, numa_cpus: [2], gpus: 2}]  # web fits cpu-a only
pods:
  - {name: web, tenant: shop, cpu_milli: 3000}
  - {name: train, tenant: ml, cpu_milli: 1000, gpu: {count: 2}}
  - {name: huge, tenant: ml, cpu_milli: 64000}
""")
    plan = simulate_cmd.build_plan(parse("--scenario", str(scenario), "--bus", nats_server.url,
                                         "--namespace", namespace))
    placement = real_placement(nats_server.url, namespace)
    seen: dict[str, subprocess.CompletedProcess] = {}

    async def warmup(sim) -> None:
        await waits_for_nodes(placement, 2)(sim)
        tick = sim.tick

        async def tick_then_look() -> float:  # while the simulation runs, as an operator would
            t = await tick()
            if t >= 20 and not seen:
                config = Path(sim.kubeconfig)
                seen["pods"] = await asyncio.to_thread(kubectl, config, "get", "pods", "-A", "-o", "wide")
                seen["nodes"] = await asyncio.to_thread(kubectl, config, "get", "nodes")
            return t
        sim.tick = tick_then_look

    task = asyncio.create_task(placement.run())
    try:
        result = await asyncio.wait_for(simulate(plan, warmup=warmup, progress=lambda line: None), patience(90))
    finally:
        placement.stop()
        await asyncio.gather(task, return_exceptions=True)
    assert seen, "kubectl was never run"
    # the run's kubeconfig named a server that is gone: its folder went with it
    assert Path(plan.settings.kubeconfig).parent == plan.scratch and not plan.scratch.exists()
    pods = seen["pods"]
    assert pods.returncode == 0, pods.stderr
    rows = {line.split()[1]: line.split() for line in pods.stdout.splitlines()[1:]}
    header = pods.stdout.splitlines()[0].split()
    assert header[:3] == ["NAMESPACE", "NAME", "READY"] and "NODE" in header
    node_at = header.index("NODE")
    assert (rows["web"][0], rows["web"][3], rows["web"][node_at]) == ("shop", "Running", "cpu-a")
    assert (rows["train"][3], rows["train"][node_at]) == ("Running", "gpu-b")
    assert (rows["huge"][3], rows["huge"][node_at]) == ("Pending", "<none>")  # it fits nowhere
    assert seen["nodes"].returncode == 0 and {"cpu-a", "gpu-b"} <= set(seen["nodes"].stdout.split())
    assert result.violations == 0


async def test_tidal_run_simulator_writes_its_kubeconfig_into_its_data_dir(nats_server, namespace, tmp_path):
    """`tidal run simulator` (as in a container): the kubeconfig goes to
    TIDAL_SIMULATOR_DATA_DIR (default .tidal/simulate), where the bridge and
    kubectl find the cluster, unless TIDAL_SIMULATOR_KUBECONFIG names a file."""
    import sys

    import yaml

    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "TIDAL_SIMULATOR_KUBECONFIG"}
    env.update(TIDAL_BUS_URL=nats_server.url, TIDAL_NAMESPACE=namespace, TIDAL_CLUSTER="sim",
               TIDAL_SIMULATOR_DATA_DIR=str(data), TIDAL_SIMULATOR_SYNTHETIC="nodes=3,pods=1",
               TIDAL_SIMULATOR_HTTP_PORT="0", TIDAL_SIMULATOR_HTTP_HOST="127.0.0.1")
    with open(tmp_path / "simulator.log", "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "tidal_cli.main", "run", "simulator"], env=env,
                                   cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=log)
    try:
        config = data / "kubeconfig"
        for _ in range(300):
            if config.exists() or process.poll() is not None:
                break
            await asyncio.sleep(0.1)
        assert config.exists(), (tmp_path / "simulator.log").read_text()[-2000:]
        server = yaml.safe_load(config.read_text())["clusters"][0]["cluster"]["server"]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{server}/api/v1/nodes") as response:
                nodes = (await response.json())["items"]
        assert len(nodes) == 3
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)


async def test_a_list_asked_with_limit_comes_in_pages_of_one_snapshot():
    async with KubeApiServer() as api, aiohttp.ClientSession() as http:
        for name in ("c", "a", "e", "b", "d"):
            api.add_pod(name, "team")
        url = f"{api.url}/api/v1/pods"
        code, page = await call(http, "GET", url, params={"limit": "2"})
        assert code == 200 and page["metadata"]["remainingItemCount"] == 3
        version, names = page["metadata"]["resourceVersion"], [p["metadata"]["name"] for p in page["items"]]
        api.add_pod("aa", "team")  # written after the first page: not in this list
        while page["metadata"].get("continue"):
            code, page = await call(http, "GET", url, params={"limit": "2", "continue": page["metadata"]["continue"]})
            assert code == 200 and page["metadata"]["resourceVersion"] == version
            names += [p["metadata"]["name"] for p in page["items"]]
        assert names == ["a", "b", "c", "d", "e"]  # key order, each once
        api.pages.kept = 1
        _, first = await call(http, "GET", url, params={"limit": "2"})
        await call(http, "GET", url, params={"limit": "2"})  # another list: the first one's snapshot goes
        code, gone = await call(http, "GET", url, params={"limit": "2", "continue": first["metadata"]["continue"]})
        assert code == 410 and gone["reason"] == "Expired"
        code, bad = await call(http, "GET", url, params={"limit": "2", "continue": "not a token"})
        assert code == 400 and bad["reason"] == "BadRequest"
