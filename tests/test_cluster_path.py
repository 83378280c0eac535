"""Every guarantee on the path a real cluster takes: pods in the (fake, real
wire protocol) Kubernetes API → the real bridge → the real placement (and
scoring) services over a real NATS server → the bridge binds → the bridge
reports the bound pods again. Nothing here publishes a pod event itself:
what placement knows of pods, it knows from the bridge.

The node agent's part (topology) is played by publishing `NodeTopology`
events, and the kubelet's by `AdmittingKubelets` (a bound pod is admitted:
status.startTime, still Pending)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
from typing import Any

import pytest

from conftest import bus_options, make_bus, patience, start_service, wait_until
from fake_kube_api import FakeKubeApi
from tidal_bridge.service import BridgeService
from tidal_bridge.settings import BridgeSettings
from tidal_bus import Bus, StartAt
from tidal_cli.sample import node
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_placement.tenancy import tenant_usage
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings
from tidal_simulator.admitting_kubelets import AdmittingKubelets
from tidal_schemas import TenantConfig
from tidal_schemas.fence import DecisionFence

CLUSTER = "c1"
A100 = [("A100", 40960)]


class Path:
    """A running cluster path: the fake API server, the bridge, placement."""

    def __init__(self, kube: FakeKubeApi, bus, url: str, namespace: str) -> None:
        self.kube, self.bus, self.url, self.namespace = kube, bus, url, namespace
        self.services: list[tuple[Any, asyncio.Task]] = []
        self.placement: PlacementService | None = None
        self.buses: list[Bus] = []

    async def start(self, service) -> Any:
        self.services.append((service, await start_service(service, timeout=30)))
        return service

    async def own_bus(self, source: str) -> Bus:
        """A connection of its own, closed with a short drain timeout: a NATS
        group subscription sometimes fails to close (see test_bridge_service.running)."""
        bus = Bus.from_url(self.url, namespace=self.namespace, cluster=CLUSTER, source=source,
                           connect_options={"drain_timeout": 2}, **bus_options(self.url))
        await bus.backend.connect()
        self.buses.append(bus)
        return bus

    async def start_placement(self, **overrides) -> PlacementService:
        values = dict(bus_url=self.url, namespace=self.namespace, cluster=CLUSTER, http_port=0,
                      http_host="127.0.0.1", gpu_strategy="best-fit", bind_timeout_s=patience(30), takeover_settle_s=0.5,
                      drain_timeout_s=2)
        values.update(overrides)
        self.placement = await self.start(PlacementService(PlacementSettings(**values),
                                                           bus=await self.own_bus("placement")))
        await wait_until(lambda: CLUSTER in self.placement.active, 30, "placement leads")
        return self.placement

    def kill(self, service) -> None:
        """As kill -9: the task is cancelled, nothing is drained or flushed."""
        for entry in list(self.services):
            if entry[0] is service:
                entry[1].cancel()
                self.services.remove(entry)

    def pod(self, name: str, *, cpu: str = "1", memory: str = "1Gi", gpus: int = 0, annotations=None,
            labels=None, **options) -> None:
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
        self.kube.add_pod(name, cpu=cpu, memory=memory, limits=limits, annotations=annotations, labels=labels,
                          **options)

    def bound(self, name: str, namespace: str = "default") -> str | None:
        pod = self.kube.pod(namespace, name) or {}
        return (pod.get("spec") or {}).get("nodeName")

    async def wait_bound(self, *names: str, timeout: float = 30) -> None:
        await wait_until(lambda: all(self.bound(n) for n in names), timeout, f"{', '.join(names)} bound")
        # ... and placement has read the bridge's report of each bound pod
        await wait_until(lambda: all(self._seen_bound(n) for n in names), timeout, "bound pods seen by placement")

    def _seen_bound(self, name: str) -> bool:
        pod = self.placement.clusters[CLUSTER].records.pod(f"default/{name}")
        return pod is not None and pod.phase in ("bound", "running")

    async def pending_reason(self, name: str) -> str:
        fence, reason = DecisionFence(), None
        async for _, event in self.bus.read("placement.decision", StartAt.earliest()):
            for d in event.payload.items:
                if fence.admit(d) and d.name == name and d.outcome in ("placed", "pending"):
                    reason = d.reason if d.outcome == "pending" else "placed"
        return reason or ""

    async def wait_pending(self, name: str, says: str, timeout: float = 20) -> None:
        deadline = asyncio.get_running_loop().time() + patience(timeout)
        while True:
            reason = await self.pending_reason(name)
            if says in reason:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{name}: expected pending with {says!r}, last decision says {reason!r}")
            await asyncio.sleep(0.1)

    async def settle(self, seconds: float = 1.0) -> None:
        """Let every stream go quiet (no decision is expected in this window)."""
        await asyncio.sleep(seconds)


@contextlib.asynccontextmanager
async def cluster_path(nats_server, namespace, *topologies, before_bridge=None, **bridge_overrides):
    async with FakeKubeApi() as kube, make_bus(nats_server.url, namespace, cluster=CLUSTER) as bus:
        await bus.ensure_streams()
        for topology in topologies:
            # its status as the node agent sees it: placement books no more than the status says
            kube.add_node(topology.node, cpu=str(len(topology.cpus)), memory=f"{topology.allocatable.memory_mib}Mi",
                          gpus=len(topology.gpus))
            await bus.publish(topology)
        path = Path(kube, bus, nats_server.url, namespace)
        admitting = asyncio.create_task(AdmittingKubelets(kube, running=False).run())
        if before_bridge is not None:  # a function of the API server, or a coroutine function
            if inspect.isawaitable(done := before_bridge(kube)):
                await done
        values = dict(bus_url=nats_server.url, namespace=namespace, cluster=CLUSTER, http_port=0,
                      http_host="127.0.0.1", kube_api_url=kube.url, backoff_initial_s=0.05, backoff_max_s=0.5,
                      api_retry_s=0.05, bind_retry_s=0.01, request_timeout_s=5, drain_timeout_s=2)
        values.update(bridge_overrides)
        await path.start(BridgeService(BridgeSettings(**values), bus=await path.own_bus("bridge")))
        try:
            yield path
        finally:
            for service, task in reversed(path.services):
                service.stop()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, patience(30))
            admitting.cancel()
            for bus in path.buses:
                await bus.backend.close()


def gpu_node(name: str, gpus: int = 4, model: str = "A100", cpus_per_numa: int = 4):
    """2 NUMA nodes × `cpus_per_numa` CPUs, 64 GiB, `gpus` GPUs."""
    return node(name, 1, 2, cpus_per_numa, 1, 64 * 1024, gpus=[(model, 40960)] * gpus, reserved=0)


def cpu_node(name: str, cpus_per_numa: int = 4):
    return node(name, 1, 2, cpus_per_numa, 1, 64 * 1024, reserved=0)


def cache(service: PlacementService) -> dict:
    """Placement's cache, field by field: free figures per node, NUMA node
    and GPU, and what each tenant holds."""
    cache = service.clusters[CLUSTER]
    return {"free": cache.state.free_by_node(), "tenants": tenant_usage(cache.holdings(), cache.gpu_model)}


# -- quota --------------------------------------------------------------------

async def test_a_quota_holds_once_the_bridge_reports_the_pods_bound(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 8)) as path:
        await path.bus.publish(TenantConfig(tenant="team-a", quota={"A100": 4000}))
        await path.start_placement()
        two_gpus = {"tidal.dev/gpu-models": "A100"}
        for name in ("p1", "p2"):
            path.pod(name, gpus=2, annotations=two_gpus, labels={"tidal.dev/tenant": "team-a"})
        await path.wait_bound("p1", "p2")
        path.pod("p3", gpus=2, annotations=two_gpus, labels={"tidal.dev/tenant": "team-a"})
        await path.wait_pending("p3", "quota")
        assert path.bound("p3") is None


# -- foreign pods ------------------------------------------------------------------

async def test_a_daemonset_pods_cpu_and_gpu_are_never_handed_out_again(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 2)) as path:
        path.pod("gpu-agent", cpu="6", gpus=1, scheduler="default-scheduler", node="g1", phase="Running",
                 spec={"priorityClassName": "system-node-critical"})
        await path.start_placement()
        await wait_until(lambda: path.placement.clusters[CLUSTER].state.held("default/gpu-agent") is not None, 20,
                         "the foreign pod counted")
        path.pod("cpu-hog", cpu="3")  # 8 CPUs − 6 held by the DaemonSet pod: does not fit
        path.pod("t1", cpu="1", gpus=1)
        path.pod("t2", cpu="1", gpus=1)  # one GPU of two is the DaemonSet pod's
        await path.wait_pending("cpu-hog", "cpu")
        await wait_until(lambda: sum(bool(path.bound(n)) for n in ("t1", "t2")) == 1, 20, "one GPU pod bound")
        late = "t2" if path.bound("t1") else "t1"
        await path.wait_pending(late, "gpu")
        # and the DaemonSet pod going away frees its room
        path.kube.delete_pod("default", "gpu-agent")
        await path.wait_bound("cpu-hog", late)


# -- restart ---------------------------------------------------------------------

MIXED = [  # (name, cpu, gpus, annotations)
    ("excl-spread", "4", 0, {"tidal.dev/exclusive-cpus": "true", "tidal.dev/cpu-policy": "spread"}),
    ("excl-single", "2", 0, {"tidal.dev/exclusive-cpus": "true", "tidal.dev/cpu-policy": "single-numa"}),
    ("whole-gpu", "1", 2, {}),
    ("half-gpu", "1", 0, {"tidal.dev/gpu-milli": "500"}),
    ("quarter-gpu", "1", 0, {"tidal.dev/gpu-milli": "250"}),
    ("plain", "1", 0, {}),
]


async def test_the_cache_rebuilt_after_kill_9_equals_the_cache_before(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 4, cpus_per_numa=8), cpu_node("n1", 8)) as path:
        path.pod("ds-gpu", cpu="1", gpus=1, scheduler="default-scheduler", node="g1", phase="Running")
        path.pod("ds-cpu", cpu="500m", scheduler="default-scheduler", node="n1", phase="Running")
        await path.bus.publish(TenantConfig(tenant="default", quota={"A100": 100_000}))
        before = await path.start_placement()
        for name, cpu, gpus, annotations in MIXED:
            path.pod(name, cpu=cpu, gpus=gpus, annotations=annotations, memory="2Gi")
        await path.wait_bound(*(name for name, *_ in MIXED))
        await path.settle()
        expected = cache(before)
        assert expected["tenants"]["default"]["A100"] == 2750  # 2 whole + a half + a quarter
        g1 = expected["free"]["g1"]
        assert sum(g1["gpu_milli"].values()) == 4000 - 2750 - 1000  # and the DaemonSet pod's GPU
        assert sum(expected["free"]["n1"]["numa_cpus"].values()) + sum(g1["numa_cpus"].values()) == 32 - 6

        path.kill(before)
        after = await path.start_placement()
        await path.settle()
        assert cache(after) == expected


async def _streams(bus) -> dict[str, list]:
    names = ("node.topology", "node.status", "tenant.config", "pod.lifecycle", "placement.decision", "bind.result")
    return {name: [e async for _, e in bus.read(name, StartAt.earliest()) if not isinstance(e, Exception)]
            for name in names}


async def _rebuilt(path: Path, streams: dict[str, list], order: list[str], seed: int | None = None) -> dict:
    """A fresh placement cache fed the streams, each in its own order (as
    placement's per-stream tasks may read them), interleaved as `order` says
    or at random."""
    service = PlacementService(PlacementSettings(bus_url=path.url, namespace=path.namespace, cluster=CLUSTER),
                               bus=path.bus)
    if seed is None:
        for name in order:
            for envelope in streams[name]:
                await service.apply(envelope)
    else:
        rng, cursors = random.Random(seed), {name: 0 for name in streams}
        while any(cursors[n] < len(streams[n]) for n in streams):
            name = rng.choice([n for n in streams if cursors[n] < len(streams[n])])
            await service.apply(streams[name][cursors[name]])
            cursors[name] += 1
    return cache(service)


async def test_the_rebuilt_cache_is_the_same_whatever_order_the_streams_are_read_in(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 4, cpus_per_numa=8), cpu_node("n1", 8)) as path:
        path.pod("ds-gpu", cpu="1", gpus=1, scheduler="default-scheduler", node="g1", phase="Running")
        path.pod("ds-cpu", cpu="500m", scheduler="default-scheduler", node="n1", phase="Running")
        placement = await path.start_placement()
        for name, cpu, gpus, annotations in MIXED:
            path.pod(name, cpu=cpu, gpus=gpus, annotations=annotations, memory="2Gi")
        await path.wait_bound(*(name for name, *_ in MIXED))
        path.pod("never-fits", cpu="64")  # pending for ever: holds nothing
        await path.wait_pending("never-fits", "cpu")
        await path.settle()
        expected = cache(placement)
        streams = await _streams(path.bus)
        orders = [
            # decisions before any pod event, bound pods before their node's topology
            # (the nodes' status before their topology, and after)
            ["placement.decision", "bind.result", "pod.lifecycle", "tenant.config", "node.status", "node.topology"],
            ["pod.lifecycle", "bind.result", "placement.decision", "node.topology", "node.status", "tenant.config"],
            ["node.status", "node.topology", "tenant.config", "pod.lifecycle", "placement.decision", "bind.result"],
        ]
        for order in orders:
            assert await _rebuilt(path, streams, order) == expected, order
        for seed in range(5):
            assert await _rebuilt(path, streams, [], seed) == expected, seed


@pytest.mark.parametrize("reads_decision_first", [True, False])
async def test_a_decision_read_before_its_pods_pending_event_books_the_pods_requests(
        nats_server, namespace, reads_decision_first):
    async with cluster_path(nats_server, namespace, cpu_node("n1")) as path:
        await path.start_placement()
        path.pod("p", cpu="3", memory="3Gi")
        await path.wait_bound("p")
        streams = await _streams(path.bus)
        # only the decision and the pending event: the bind not reported yet
        pending = [e for e in streams["pod.lifecycle"] if e.payload.phase == "pending"]
        streams = {"node.topology": streams["node.topology"], "placement.decision": streams["placement.decision"],
                   "pod.lifecycle": pending}
        order = ["node.topology", "placement.decision", "pod.lifecycle"]
        if not reads_decision_first:
            order = ["node.topology", "pod.lifecycle", "placement.decision"]
        empty = (await _rebuilt(path, {"node.topology": streams["node.topology"]}, ["node.topology"]))["free"]["n1"]
        free = (await _rebuilt(path, streams, order))["free"]["n1"]
        assert (free["cpu_milli"], free["memory_mib"]) == (empty["cpu_milli"] - 3000, empty["memory_mib"] - 3072)


# -- fair share per GPU model ----------------------------------------------------

async def test_fair_share_orders_two_users_a100_pods_by_their_a100_usage(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 2)) as path:
        await path.start(ScoringService(ScoringSettings(
            bus_url=nats_server.url, namespace=namespace, cluster=CLUSTER, http_port=0, http_host="127.0.0.1",
            period_s=0.2, settle_time="8s", drain_timeout_s=2), bus=await path.own_bus("scoring")))
        placement = await path.start_placement()
        a100 = {"tidal.dev/gpu-models": "A100"}
        path.pod("alice-run", gpus=1, annotations=a100, labels={"tidal.dev/user": "alice"})
        path.pod("holder", gpus=1, labels={"tidal.dev/user": "carol"})
        await path.wait_bound("alice-run", "holder")
        await wait_until(lambda: placement.clusters[CLUSTER].scores.get(("alice", "A100"), 0) > 0, 20,
                         "alice charged for her A100")
        # alice asks first (and sorts first by name): only fair share can put bob ahead
        path.pod("a-next", gpus=1, annotations=a100, labels={"tidal.dev/user": "alice"})
        path.pod("b-next", gpus=1, annotations=a100, labels={"tidal.dev/user": "bob"})
        await path.wait_pending("a-next", "gpu")
        await path.wait_pending("b-next", "gpu")
        path.kube.delete_pod("default", "holder")  # one A100 frees: the lower A100 score takes it
        await path.wait_bound("b-next")
        assert path.bound("a-next") is None


# -- tenants: permissions, quota per model, refusals -------------------------------

async def test_a_tenant_allowed_one_gpu_uses_that_gpu_only(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 4)) as path:
        await path.bus.publish(TenantConfig(tenant="team-a", permissions={"gpus": ["g1-gpu0"]},
                                            groups=[{"name": "other", "bindings": [{"node": "g1",
                                                                                   "gpus": ["g1-gpu3"]}]}]))
        await path.start_placement()
        team_a = {"tidal.dev/tenant": "team-a"}
        path.pod("first", gpus=1, labels=team_a)
        await path.wait_bound("first")
        path.pod("second", gpus=1, labels=team_a)
        await path.wait_pending("second", "")
        await path.settle(0.5)
        assert path.bound("second") is None
        pod = path.kube.pod("default", "first")
        assert '"gpu":"g1-gpu0"' in pod["metadata"]["annotations"]["tidal.dev/gpus"]


async def test_a_pod_naming_no_model_takes_a_model_whose_quota_has_room(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("a1", 2, "A100"), gpu_node("v1", 2, "V100")) as path:
        await path.bus.publish(TenantConfig(tenant="team-a", quota={"A100": 1000}))
        await path.start_placement()
        team_a = {"tidal.dev/tenant": "team-a"}
        path.pod("on-a100", gpus=1, labels=team_a, annotations={"tidal.dev/gpu-models": "A100"})
        await path.wait_bound("on-a100")
        path.pod("any-model", gpus=1, labels=team_a)
        await path.wait_bound("any-model")
        assert path.bound("any-model") == "v1"


async def test_a_pod_refused_by_quota_does_not_hold_back_another_tenants_pod(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 2)) as path:
        await path.bus.publish(TenantConfig(tenant="team-a", quota={"A100": 0}))
        await path.start_placement(permit_timeout_s=120)
        a100 = {"tidal.dev/gpu-models": "A100"}
        path.pod("a-over-quota", gpus=1, annotations=a100, labels={"tidal.dev/tenant": "team-a"})
        await path.wait_pending("a-over-quota", "quota")
        path.pod("b-fits", gpus=1, annotations=a100, labels={"tidal.dev/tenant": "team-b"})
        await path.wait_bound("b-fits", timeout=10)  # well inside the permit timeout


async def test_the_group_chosen_is_one_whose_node_fits_the_whole_pod(nats_server, namespace):
    small = gpu_node("small", 4, cpus_per_numa=1)  # 2 CPUs: GPUs free but too few CPUs
    large = gpu_node("large", 2, cpus_per_numa=8)
    async with cluster_path(nats_server, namespace, small, large) as path:
        # best fit on GPUs alone is "tight" (nothing left over), whose node lacks the CPUs
        groups = [{"name": "tight", "bindings": [{"node": "small", "gpus": ["small-gpu0"]}]},
                  {"name": "roomy", "bindings": [{"node": "large", "gpus": ["large-gpu0", "large-gpu1"]}]}]
        await path.bus.publish(TenantConfig(tenant="team-a", groups=groups))
        await path.start_placement()
        path.pod("needs-cpus", cpu="6", gpus=1, labels={"tidal.dev/tenant": "team-a"})
        await path.wait_bound("needs-cpus")
        assert path.bound("needs-cpus") == "large"
