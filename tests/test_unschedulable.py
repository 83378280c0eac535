"""The words on a pod Tidal cannot place (pure): kube-scheduler's FitError
message from a pending decision, the PodScheduled condition patch, and the
per-pod event budget (client-go's spam filter)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tidal_bridge.event_budget import EventBudget
from tidal_bridge.unschedulable import (FALLBACK, PHRASES, decision_message, fit_error, phrase,
                                        scheduled_condition, status_patch)
from tidal_placement.cache import STOP_SCHEDULING
from tidal_placement.sched_metrics import STAGES
from tidal_placement.staleness import stale_reason
from tidal_schemas import PlacementDecision


def pending(reason: str = "", filtered: dict | None = None, nodes: int | None = None) -> PlacementDecision:
    return PlacementDecision(decision_id="d", namespace="default", name="p", outcome="pending", reason=reason,
                             filtered=filtered or {}, nodes=nodes)


@pytest.mark.parametrize("decision, message", [
    # nodes filtered out, counted by reason and sorted as strings as kube-scheduler does ("12" < "3")
    (pending("0/5000 nodes fit: 4985 cpu, 12 stop-scheduling taint, 3 memory",
             {"cpu": 4985, "stop-scheduling taint": 12, "memory": 3}, 5000),
     "0/5000 nodes are available: 12 node(s) had untolerated taint {tidal.dev/stop-scheduling: }, "
     "3 Insufficient memory, 4985 Insufficient cpu."),
    (pending("0/4 nodes fit: 3 gpu, 1 gpu-model", {"gpu-model": 1, "gpu": 3}, 4),
     "0/4 nodes are available: 1 node(s) had no GPU of the requested model, 3 Insufficient nvidia.com/gpu."),
    # the NUMA policy: nodes with room whose NUMA nodes cannot hold the exclusive CPUs as asked
    (pending("0/6 nodes fit: 4 numa, 2 no-exclusive-cpus", {"numa": 4, "no-exclusive-cpus": 2}, 6),
     "0/6 nodes are available: 2 node(s) offer no exclusive CPUs, 4 node(s) could not satisfy the pod's "
     "NUMA policy."),
    (pending("0/3 nodes fit: 2 not-permitted, 1 cpu", {"not-permitted": 2, "cpu": 1}, 3),
     "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) are not permitted to the pod's tenant."),
    # a reason without a phrase is shown as it is
    (pending("0/2 nodes fit: 2 stale: no metrics for 30s", {"stale: no metrics for 30s": 2}, 2),
     "0/2 nodes are available: 2 node(s) took no new pods (stale: no metrics for 30s)."),
    # a zero count names nothing
    (pending("0/1 nodes fit: 1 cpu", {"cpu": 1, "memory": 0}, 1), "0/1 nodes are available: 1 Insufficient cpu."),
    # Tidal's own rules: no node was looked at, the rule is the message (a PreFilter's, in kube-scheduler)
    (pending("quota: tenant team-a has no room for 1000 milli-GPU of A100", nodes=5000),
     "0/5000 nodes are available: quota: tenant team-a has no room for 1000 milli-GPU of A100."),
    (pending("quota: tenant team-a cpu 3000 + 2000 > limit 4000", nodes=5000),
     "0/5000 nodes are available: quota: tenant team-a cpu 3000 + 2000 > limit 4000."),
    (pending("permission: tenant team-a may use no GPU the pod asks for", nodes=12),
     "0/12 nodes are available: permission: tenant team-a may use no GPU the pod asks for."),
    (pending("waiting behind a higher-priority A100 pod", nodes=8),
     "0/8 nodes are available: waiting behind a higher-priority A100 pod."),
    (pending("invalid pod: tidal.dev/gpu-count: not a whole number", nodes=3),
     "0/3 nodes are available: invalid pod: tidal.dev/gpu-count: not a whole number."),
    # a decision from before `nodes` existed: every node is counted under exactly one reason
    (pending("0/7 nodes fit: 5 cpu, 2 memory", {"cpu": 5, "memory": 2}), "0/7 nodes are available: "
     "2 Insufficient memory, 5 Insufficient cpu."),
    # no nodes at all: kube-scheduler's ErrNoNodesAvailable
    (pending("0/0 nodes fit", nodes=0), "no nodes available to schedule pods"),
])
def test_decision_message(decision, message):
    assert decision_message(decision) == message


def test_the_gpu_resource_is_the_clusters():
    decision = pending("0/2 nodes fit: 2 gpu", {"gpu": 2}, 2)
    assert decision_message(decision, "amd.com/gpu") == "0/2 nodes are available: 2 Insufficient amd.com/gpu."


@pytest.mark.parametrize("reason", sorted({*STAGES, STOP_SCHEDULING}))
def test_every_filter_reason_placement_names_has_kube_schedulers_words(reason):
    # decide.py's stages (as the metrics know them) and the taint placement blocks nodes for
    assert reason in PHRASES and phrase(reason) != FALLBACK.format(reason=reason)


def test_a_stale_node_reason_is_shown_through_the_fallback():
    assert phrase(stale_reason(30)) == f"node(s) took no new pods ({stale_reason(30)})"


def test_fit_error_is_bounded():
    assert len(fit_error(3, {}, "quota: " + "x" * 10_000)) == 4096


def test_the_condition_patch_merges_one_condition_by_type():
    since = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    assert status_patch(scheduled_condition("0/1 nodes are available: 1 Insufficient cpu.", since)) == {
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                   "message": "0/1 nodes are available: 1 Insufficient cpu.",
                                   "lastTransitionTime": "2026-01-02T03:04:05Z"}]}}
    # a changed message on a pod already unschedulable leaves its transition time alone
    assert "lastTransitionTime" not in scheduled_condition("…")


def test_the_event_budget_is_a_token_bucket_per_pod():
    budget = EventBudget(burst=3, refill_s=10.0)
    # 3 at once, then none until a token has refilled (10s per token)
    assert [budget.allow("a", t) for t in (0.0, 0.1, 0.2, 0.3, 5.0)] == [True, True, True, False, False]
    assert budget.allow("b", 5.0)  # another pod has its own bucket
    assert budget.allow("a", 10.3) and not budget.allow("a", 10.4)
    # a long quiet refills to the burst, never beyond: 3 then none
    assert [budget.allow("a", 1000.0 + i * 0.01) for i in range(4)] == [True, True, True, False]
    budget.forget("a")  # a pod bound or deleted starts anew
    assert budget.allow("a", 1000.1)


def test_the_event_budget_keeps_a_bounded_number_of_pods():
    budget = EventBudget(burst=1, refill_s=100.0, max_keys=2)
    assert budget.allow("a", 0.0) and budget.allow("b", 0.0) and budget.allow("c", 0.0)
    assert not budget.allow("c", 1.0) and budget.allow("a", 1.0)  # "a" was dropped, least recently used
    with pytest.raises(ValueError):
        EventBudget(burst=0)
