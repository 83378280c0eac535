"""Tenants and fair share as Kubernetes objects, end to end: Tenant and
FairShare objects in the (fake, real wire protocol) API server, written and
read through kubernetes-asyncio as a user's tools would → the real bridge →
`tenant.config` on a real NATS bus → the real placement (and scoring)
services; usage and scores come back to the objects' status."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from conftest import make_bus, patience, wait_until
from test_cluster_path import CLUSTER, cluster_path, gpu_node
from tidal_bridge.service import BridgeService
from tidal_bus import StartAt
from tidal_cli.main import main as cli_main
from tidal_scoring.service import ScoringService
from tidal_schemas import TenantConfig
from tidal_scoring.settings import ScoringSettings
from tidal_simulator.kube_api import write_kubeconfig

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION = "tidal.dev", "v1alpha1"
KUBECTL = shutil.which("kubectl")
FAST = dict(status_interval_s=0.3)
TEAM = {"tidal.dev/tenant": "team-a"}
A100 = {"tidal.dev/gpu-models": "A100"}


def register_crds(kube) -> None:
    for path in sorted((ROOT / "k8s/base/crds").glob("*.yaml")):
        kube.custom.register(yaml.safe_load(path.read_text()))


def tenant(name: str, spec: dict) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant", "metadata": {"name": name}, "spec": spec}


class Objects:
    """The custom resources as kubectl would reach them: kubernetes-asyncio."""

    def __init__(self, url: str) -> None:
        self.api_client = client.ApiClient(client.Configuration(host=url))
        self.api = client.CustomObjectsApi(self.api_client)

    async def apply(self, body: dict) -> dict:
        return await self.api.create_cluster_custom_object(GROUP, VERSION, "tenants", body)

    async def patch(self, name: str, spec: dict) -> dict:
        return await self.api.patch_cluster_custom_object(GROUP, VERSION, "tenants", name, {"spec": spec},
                                                          _content_type="application/merge-patch+json")

    async def delete(self, plural: str, name: str) -> None:
        await self.api.delete_cluster_custom_object(GROUP, VERSION, plural, name)

    async def get(self, plural: str, name: str) -> dict | None:
        try:
            return await self.api.get_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


async def wait_status(objects: Objects, plural: str, name: str, check, what: str, timeout: float = 20) -> dict:
    deadline = asyncio.get_running_loop().time() + patience(timeout)
    while True:
        obj = await objects.get(plural, name)
        status = (obj or {}).get("status") or {}
        if check(status):
            return obj
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{plural}/{name}: {what}; status is {status}")
        await asyncio.sleep(0.1)


def ready(status: dict) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})


async def configs(bus, name: str) -> list:
    return [e.payload async for _, e in bus.read("tenant.config", StartAt.earliest())
            if not isinstance(e, Exception) and e.payload.tenant == name]


def kubectl(config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"HOME": str(config.parent), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # its discovery cache there
    return subprocess.run([KUBECTL, "--kubeconfig", str(config), *args], capture_output=True, text=True, env=env,
                          timeout=patience(60))


async def test_a_tenant_object_sets_the_quota_placement_applies_and_shows_its_usage(nats_server, namespace, tmp_path):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 8), before_bridge=register_crds, **FAST) as path:
        objects = Objects(path.kube.url)
        try:
            placement = await path.start_placement(tenant_report_s=0.2)
            await objects.apply(tenant("team-a", {"quota": {"A100": 2000}, "autoGrouping": {"byModel": True}}))
            await wait_until(lambda: "team-a" in placement.clusters[CLUSTER].tenants, 20, "placement has the tenant")
            path.pod("p1", gpus=2, annotations=A100, labels=TEAM)
            await path.wait_bound("p1")
            path.pod("p2", gpus=1, annotations=A100, labels=TEAM)
            await path.wait_pending("p2", "quota")  # 6 GPUs are free: only the Tenant's quota refuses it
            obj = await wait_status(objects, "tenants", "team-a", lambda s: s.get("held", {}).get("A100") == 2000,
                                    "usage shown")
            status = obj["status"]
            assert status["gpus"] == "A100 2/2" and status["quota"] == {"A100": 2000}
            assert status["freeGroups"] == ["auto-A100-any"] and status["freeGroupCount"] == 1
            assert (ready(status)["status"], ready(status)["reason"]) == ("True", "Published")
            if KUBECTL:  # what an operator sees
                config = write_kubeconfig(tmp_path / "kubeconfig", path.kube.url)
                shown = await asyncio.to_thread(kubectl, config, "get", "tenants")
                assert shown.returncode == 0, shown.stderr
                header, row = shown.stdout.splitlines()[:2]
                assert header.split()[:5] == ["NAME", "GPUS", "FREE", "GROUPS", "READY"]
                assert row.split()[:5] == ["team-a", "A100", "2/2", "1", "True"]
            # a larger quota, applied to the object, lets p2 in
            await objects.patch("team-a", {"quota": {"A100": 3000}})
            await path.wait_bound("p2")
            await wait_status(objects, "tenants", "team-a", lambda s: s.get("gpus") == "A100 3/3", "new usage shown")
            # deleting the object deletes the tenant: its quota no longer holds
            await objects.delete("tenants", "team-a")
            await wait_until(lambda: placement.clusters[CLUSTER].tenants["team-a"].deleted, 20, "tenant deleted")
            assert [c.deleted for c in await configs(path.bus, "team-a")] == [True]  # the stream keeps the last
            path.pod("p3", gpus=1, annotations=A100, labels=TEAM)
            await path.wait_bound("p3")
        finally:
            await objects.api_client.close()


async def test_invalid_tenants_are_refused_by_the_schema_or_marked_and_never_published(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 2), before_bridge=register_crds, **FAST) as path:
        objects = Objects(path.kube.url)
        try:
            with pytest.raises(ApiException) as refused:
                await objects.apply(tenant("negative", {"quota": {"cpu": -1}}))
            assert refused.value.status == 422 and "spec.quota.cpu" in refused.value.body
            # groups and autoGrouping together: a CEL rule of the CRD (tests/test_crd_rules.py), which this
            # API server does not evaluate, as one without CEL would not: the bridge marks it
            group = {"name": "g", "bindings": [{"node": "g1", "gpus": ["g1-gpu0"]}]}
            await objects.apply(tenant("both", {"groups": [group], "autoGrouping": {"byModel": True}}))
            obj = await wait_status(objects, "tenants", "both", lambda s: ready(s).get("status") == "False",
                                    "InvalidSpec condition")
            condition = ready(obj["status"])
            assert condition["reason"] == "InvalidSpec" and "either groups (manual)" in condition["message"]
            assert condition["observedGeneration"] == 1
            # repeated group names: the condition names the field
            await objects.apply(tenant("twice", {"groups": [group, group]}))
            obj = await wait_status(objects, "tenants", "twice", lambda s: ready(s).get("status") == "False",
                                    "InvalidSpec condition")
            assert "field 'spec.groups'" in ready(obj["status"])["message"]
            # fixed: published, and the condition turns True for the new generation
            await objects.patch("twice", {"groups": [group]})
            obj = await wait_status(objects, "tenants", "twice", lambda s: ready(s).get("status") == "True",
                                    "Ready once fixed")
            assert ready(obj["status"])["observedGeneration"] == 2
            assert [c.groups[0].name for c in await configs(path.bus, "twice")] == ["g"]
            # the former snake_case spelling: published all the same, each deprecated key named
            await objects.apply(tenant("old", {"auto_grouping": {"by_model": False, "gpus_per_container": 2}}))
            obj = await wait_status(objects, "tenants", "old", lambda s: ready(s).get("status") == "True",
                                    "published despite the old spelling")
            message = ready(obj["status"])["message"]
            assert message.startswith("generation 1 published as tenant.config; spec.auto_grouping is deprecated, "
                                      "write spec.autoGrouping") and "spec.autoGrouping.gpusPerContainer" in message
            (old,) = await configs(path.bus, "old")
            assert (old.auto_grouping.by_model, old.auto_grouping.gpus_per_container) == (False, 2)
            # valid, but over the bus's event size (1 MiB): said so, not retried
            await objects.apply(tenant("huge", {"permissions": {"nodes": [f"node-{i:07d}" for i in range(90_000)]}}))
            obj = await wait_status(objects, "tenants", "huge", lambda s: ready(s).get("status") == "False",
                                    "NotPublishable condition")
            assert ready(obj["status"])["reason"] == "NotPublishable" and "bytes" in ready(obj["status"])["message"]
            for name in ("both", "negative", "huge"):
                assert await configs(path.bus, name) == []
        finally:
            await objects.api_client.close()


async def test_a_users_fair_share_record_shows_the_scores_of_the_pipeline(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 2), before_bridge=register_crds, **FAST) as path:
        objects = Objects(path.kube.url)
        try:
            await path.start(ScoringService(ScoringSettings(
                bus_url=nats_server.url, namespace=namespace, cluster=CLUSTER, http_port=0, http_host="127.0.0.1",
                period_s=0.2, settle_time="8s", drain_timeout_s=2), bus=await path.own_bus("scoring")))
            await path.start_placement()
            (bridge, _), = path.services[:1]
            team = await objects.apply(tenant("team-a", {}))
            await wait_until(lambda: "team-a" in bridge.tenants.published, 20, "the tenant seen by the bridge")
            path.pod("run", gpus=1, annotations=A100, labels={"tidal.dev/user": "alice", **TEAM}, phase="Running")
            await path.wait_bound("run")
            path.kube.update_pod("default", "run", lambda pod: pod["status"].update(phase="Running"))
            # her pod's GPU is charged to its model and to all GPUs ("gpu"), each a score.user of its own
            obj = await wait_status(objects, "fairshares", "alice", lambda s: min(
                s.get("scores", {}).get(kind, 0) for kind in ("A100", "gpu")) > 0, "alice's A100 and gpu scores")
            assert obj["spec"] == {"user": "alice"} and obj["status"]["lastUpdate"]
            # owned by her pod's Tenant: the API server's garbage collector deletes it with the tenant
            assert obj["metadata"]["ownerReferences"] == [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "Tenant",
                                                           "name": "team-a", "uid": team["metadata"]["uid"]}]
            assert obj["status"]["usage"]["A100"] > 0
            first = obj["status"]["scores"]["A100"]
            await wait_status(objects, "fairshares", "alice", lambda s: s["scores"]["A100"] > first, "score grows")
            # rate-limited: fewer writes than scoring's updates (5 per second, three types each)
            writes, since = path.kube.count("PATCH", "/fairshares/alice/status"), asyncio.get_running_loop().time()
            await asyncio.sleep(1.0)
            took = asyncio.get_running_loop().time() - since  # a second, or more on a busy machine: its rate is the bound
            assert path.kube.count("PATCH", "/fairshares/alice/status") - writes <= took / FAST["status_interval_s"] + 1
        finally:
            await objects.api_client.close()


async def test_a_tenant_deleted_while_the_bridge_was_down_is_deleted_when_it_starts(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 2), before_bridge=register_crds, **FAST) as path:
        objects = Objects(path.kube.url)
        try:
            (bridge, _), = path.services
            await objects.apply(tenant("gone", {"quota": {"cpu": 4000}}))
            await objects.apply(tenant("kept", {"quota": {"cpu": 4000}}))
            await path.bus.publish(TenantConfig(tenant="by-cli", quota={"cpu": 1000}))  # no object: not the bridge's
            await wait_until(lambda: bridge.tenants.published.keys() >= {"gone", "kept"}, 20, "both published")
            await wait_until(lambda: bridge.tenants.status.writes >= 2, 20, "conditions written")
            path.kill(bridge)
            await objects.delete("tenants", "gone")
            await path.start(BridgeService(bridge.settings, bus=await path.own_bus("bridge")))
            deadline = asyncio.get_running_loop().time() + patience(20)
            while not (await configs(path.bus, "gone"))[-1].deleted:
                assert asyncio.get_running_loop().time() < deadline, "the deletion was not published"
                await asyncio.sleep(0.1)
            assert not (await configs(path.bus, "kept"))[-1].deleted
            assert not (await configs(path.bus, "by-cli"))[-1].deleted
        finally:
            await objects.api_client.close()


def test_tidal_tenants_apply_takes_the_manifests_kubectl_takes(nats_server, namespace, tmp_path):
    manifests = tmp_path / "tenant.yaml"
    manifests.write_text(yaml.safe_dump_all([
        tenant("vision", {"quota": {"A100": 4000}, "autoGrouping": {"byModel": True}}),
        {"apiVersion": "v1", "kind": "List", "items": [tenant("speech", {"permissions": {"nodes": ["g1"]}})]}]))
    bus = ["--bus", nats_server.url, "--namespace", namespace]
    assert cli_main(["tenants", "apply", str(manifests), *bus]) == 0

    async def read() -> dict:
        async with make_bus(nats_server.url, namespace) as connected:
            return {e.payload.tenant: e.payload async for _, e in connected.read("tenant.config", StartAt.earliest())}
    published = asyncio.run(read())
    assert published["vision"].quota == {"A100": 4000} and published["speech"].permissions.nodes == ["g1"]
    assert cli_main(["tenants", "apply", str(ROOT / "k8s/examples/tenant.yaml"), *bus]) == 0  # the README's
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump(tenant("t", {"qouta": {"cpu": 1}})))
    assert cli_main(["tenants", "apply", str(typo), *bus]) == 2
