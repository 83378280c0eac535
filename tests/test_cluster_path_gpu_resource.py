"""Pods asking GPUs with the `tidal.dev/gpu-milli` resource on the path a real
cluster takes (the fake API server → the real bridge → the real placement
over a real NATS server → the bridge binds): a share and whole GPUs are
placed as asked, and a pod that does not fit is explained naming the
resource it asked, as kube-scheduler names the resource a pod lacks."""

from __future__ import annotations

from test_cluster_path import CLUSTER, cluster_path, gpu_node

from conftest import wait_until

R = "tidal.dev/gpu-milli"


def condition(path, name: str) -> str:
    pod = path.kube.pod("default", name) or {}
    found = [c for c in (pod.get("status") or {}).get("conditions", []) if c["type"] == "PodScheduled"]
    return found[0].get("message", "") if found else ""


async def test_the_resource_is_placed_as_asked_and_named_when_it_does_not_fit(nats_server, namespace):
    async with cluster_path(nats_server, namespace, gpu_node("g1", 2)) as path:
        await path.start_placement()
        path.kube.add_pod("share", limits={R: "500"})
        path.kube.add_pod("whole", limits={R: "1000"})
        await path.wait_bound("share", "whole")
        held = {p: dict(path.placement.clusters[CLUSTER].state.held(f"default/{p}").gpus) for p in ("share", "whole")}
        assert sorted(held["share"].values()) == [500] and sorted(held["whole"].values()) == [1000]
        # 2 GPUs, one of them half taken: two whole ones do not fit, in either form
        # (one after the other: the second would wait behind the first, a pod of its type)
        path.kube.add_pod("two", limits={R: "2000"})
        await wait_until(lambda: condition(path, "two"), 20, "two explained")
        assert condition(path, "two") == f"0/1 nodes are available: 1 Insufficient {R}."
        path.kube.delete_pod("default", "two")
        path.pod("two-older", gpus=2)
        await wait_until(lambda: condition(path, "two-older"), 20, "two-older explained")
        assert condition(path, "two-older") == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
