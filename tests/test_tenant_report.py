"""What placement reports of each tenant (`tenant.usage`, tenant_report.py):
held against quota by the quota rule, and per group the GPUs wholly free
on nodes that take pods; a report is repeated only when it changed."""

from __future__ import annotations

from builders import T0, pod
from tidal_placement.cache import ClusterCache
from tidal_placement.tenant_report import free_whole_gpus, same_usage, tenant_reports
from tidal_schemas import GpuAsk, GpuBinding, GpuGroup, GpuShare, TenantConfig
from tidal_simulator.topology_builder import make_topology


def cache_with(*events) -> ClusterCache:
    cache = ClusterCache("c1", permit_timeout_s=30, stale_after_s=0)
    for event in events:
        cache.apply(event, 0.0)
    return cache


def bound(name: str, tenant: str, node: str, shares: list[tuple[str, int]]):
    return pod(name, phase="bound", node=node, tenant=tenant, gpu=GpuAsk(count=1, milli=shares[0][1]),
               gpus=[GpuShare(gpu=g, milli=m, model="A100") for g, m in shares], decision_id="d-" + name)


def group(name: str, node: str, gpus: list[str]) -> GpuGroup:
    return GpuGroup(name=name, bindings=[GpuBinding(node=node, gpus=gpus)])


def test_a_tenants_report_counts_what_it_holds_and_its_groups_free_gpus():
    cache = cache_with(
        make_topology("n1", gpus=4),
        TenantConfig(tenant="vision", quota={"A100": 3000},
                     groups=[group("pair", "n1", ["gpu0", "gpu1"]), group("rest", "n1", ["gpu2", "gpu3"])]),
        TenantConfig(tenant="idle"), TenantConfig(tenant="gone", deleted=True),
        bound("whole", "vision", "n1", [("gpu0", 1000)]),
        bound("half", "vision", "n1", [("gpu2", 500)]))
    reports = {r.tenant: r for r in tenant_reports(cache, T0)}
    assert set(reports) == {"vision", "idle"}  # a deleted tenant is not reported
    vision = reports["vision"]
    # 1000 + 500 milli of A100, charged to the model and to all GPUs; 1 CPU and 512 MiB per pod
    assert vision.held == {"A100": 1500, "gpu": 1500, "cpu": 2000, "memory": 1024}
    assert vision.quota == {"A100": 3000}
    # pair: gpu1 free (gpu0 held); rest: gpu3 free (gpu2 half held is not whole)
    assert vision.groups_free == {"pair": 1, "rest": 1}
    assert reports["idle"].held == {} and reports["idle"].groups_free == {}


def test_a_node_that_takes_no_pods_frees_nothing_and_unchanged_reports_are_not_repeated():
    cache = cache_with(make_topology("n1", gpus=2), TenantConfig(tenant="t", groups=[group("g", "n1", ["gpu0", "gpu1"])]))
    (first,) = tenant_reports(cache, T0)
    assert first.groups_free == {"g": 2}
    (again,) = tenant_reports(cache, T0.replace(hour=5))
    assert same_usage(first, again) and not same_usage(None, again)
    cache.state.set_blocked("n1", "stop-scheduling taint")
    (blocked,) = tenant_reports(cache, T0)
    assert blocked.groups_free == {"g": 0} and not same_usage(first, blocked)
    assert free_whole_gpus(cache.state, cache.groups.get("t").groups[0]) == 0
