"""What a scheduling cycle of a cluster with quotas or GPU groups pays to
know each tenant's usage: the rule computed from every pod held
(`tenancy.tenant_usage` of `ClusterCache.holdings()`) against the usage the
cache keeps as holdings change (`ClusterCache.tenant_usage`, its
`TenantLedger`), and what a pod's holding costs the cache with the ledger
kept (`hold_us_per_pod`: reading the pod's event, holding and charging).

`--nodes` nodes (two NUMA nodes, 8 GPUs each) take `--pods` running pods of
`--tenants` tenants, half of them holding half a GPU, as placement's cache
reads them from `pod.lifecycle`.

Prints one JSON line:
{"nodes": N, "pods": P, "tenants": T, "full_pass_ms": X, "ledger_ms": Y, "hold_us_per_pod": Z}

Run: .venv/bin/python bench/tenant_usage.py [--nodes 5000] [--pods 20000] [--tenants 5]
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone

import _common
from tidal_placement import ClusterCache, tenant_usage
from tidal_schemas import GpuShare, PodLifecycle, Resources
from tidal_simulator.topology_builder import make_topology

REPEATS = 5


def best_ms(work) -> float:
    """The fastest of `REPEATS` runs of `work`, in ms of CPU time."""
    times = []
    for _ in range(REPEATS):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return round(min(times) * 1e3, 3)


def main(args: argparse.Namespace) -> dict:
    cache = ClusterCache("c1", 30.0, 0.0)
    for i in range(args.nodes):
        cache.apply(make_topology(f"node-{i:05d}", (16, 16), gpus=8, model=("A100", "T4")[i % 2]), 0.0)
    at = datetime.now(timezone.utc)
    pods = [PodLifecycle(namespace="bench", name=f"p{i}", uid=f"u{i}", phase="running", created_at=at,
                         node=f"node-{i % args.nodes:05d}", requests=Resources(cpu_milli=1000, memory_mib=512),
                         tenant=f"tenant-{i % args.tenants}",
                         gpus=[GpuShare(gpu=f"gpu{i % 8}", milli=500)] if i % 2 else [])
            for i in range(args.pods)]
    cache.tenant_usage()  # asked for from the start, as in a cluster with quotas: each holding is charged
    started = time.process_time()
    for pod in pods:
        cache.apply(pod, 0.0)
    held_s = time.process_time() - started
    full = tenant_usage(cache.holdings(), cache.gpu_model)
    if cache.tenant_usage() != full:
        raise SystemExit("the kept usage differs from the usage of every pod held")
    return {"nodes": args.nodes, "pods": args.pods, "tenants": args.tenants,
            "full_pass_ms": best_ms(lambda: tenant_usage(cache.holdings(), cache.gpu_model)),
            "ledger_ms": best_ms(cache.tenant_usage),
            "hold_us_per_pod": round(held_s * 1e6 / args.pods, 1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--tenants", type=int, default=5)
    args = parser.parse_args()
    _common.collect_oldest_only_when_asked()  # as in a service's process
    print(json.dumps(main(args)), flush=True)
