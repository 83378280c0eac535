"""Oversell's pods by node: the pods holding resources on a node, as pod
events come (placed, running, moved, ended, in two clusters)."""

from __future__ import annotations

from builders import T0, pod
from tidal_oversell.pods_by_node import HeldPod, PodsByNode
from tidal_schemas import PodLifecycle


def _names(pods) -> list[str]:
    return [p.event_key().split("/")[1] for p in pods]


def test_a_node_lists_the_pods_holding_it_by_key_and_forgets_those_gone():
    by_node = PodsByNode()
    by_node.apply("c1", pod("b", phase="running", node="n1"))
    by_node.apply("c1", pod("a", phase="bound", node="n1"))
    by_node.apply("c1", pod("pending"))  # holds nothing, on no node
    by_node.apply("c2", pod("a", phase="running", node="n1"))  # another cluster's n1
    assert _names(by_node.on("c1", "n1")) == ["a", "b"]
    assert _names(by_node.on("c2", "n1")) == ["a"] and by_node.on("c1", "n2") == []
    by_node.apply("c1", pod("a", phase="running", node="n2"))  # the same pod, now on n2
    assert _names(by_node.on("c1", "n1")) == ["b"] and _names(by_node.on("c1", "n2")) == ["a"]
    by_node.apply("c1", pod("b", phase="pending"))  # back to pending: a rolled-back bind
    by_node.apply("c1", pod("a", phase="deleted", node="n2"))
    assert by_node.on("c1", "n1") == [] and by_node.on("c1", "n2") == []
    assert len(by_node) == 1  # c2's a
    assert by_node.on("c1", "n1") is not by_node.on("c1", "n1")  # a copy: the caller may keep it


def test_a_pod_is_kept_as_what_oversell_reads_of_it():
    by_node = PodsByNode()
    running = pod("a", phase="running", node="n1", priority=7, evictable=True, qos="LS", memory_mib=900,
                  started_at=T0)
    by_node.apply("c1", running)
    (held,) = by_node.on("c1", "n1")
    read = ("key", "node", "cpu_milli", "memory_mib", "started_at", "created_at", "qos", "priority", "evictable",
            "system_critical")
    assert [getattr(held, name) for name in read] == \
        ["default/a", "n1", 1000, 900, T0, running.created_at, "LS", 7, True, False]
    assert isinstance(held, HeldPod) and not isinstance(held, PodLifecycle)
    # the pods of one workload on one node share one record of what they share
    by_node.apply("c1", pod("b", phase="running", node="n1", priority=7, evictable=True, qos="LS", memory_mib=900))
    assert [p.shape for p in by_node.on("c1", "n1")] == [held.shape] * 2
    assert by_node.on("c1", "n1")[1].shape is held.shape and by_node.on("c1", "n1")[1].started_at is None
