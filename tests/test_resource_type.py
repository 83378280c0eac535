"""One resource-type key (issue 14 part 4): the schema function, scoring's
charge of a running pod, and the queue's lookup agree, so two users'
A100-constrained pods are ordered by their A100 usage."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from builders import T0, pod
from tidal_cli.explain_cmd import describe
from tidal_placement.queue import SchedulingQueue
from tidal_schemas import GpuAsk, GpuShare, PlacementDecision, resource_type
from tidal_scoring.fairshare import FairShareBook, usage_by_resource_type
from tidal_scoring.running import RunningPods, running_pod

DAY = 86400.0


@pytest.mark.parametrize("gpu, expected", [
    (GpuAsk(), "cpu"),                                     # no GPU
    (GpuAsk(count=1, models=["A100"]), "A100"),            # exactly one model: that model
    (GpuAsk(count=2, milli=1000), "gpu"),                  # any model: the generic type
    (GpuAsk(count=1, models=["A100", "V100"]), "gpu"),     # several models: the generic type
    (GpuAsk(count=1, milli=300, models=["T4"]), "T4"),     # a share of one model
])
def test_resource_type_rule(gpu, expected):
    assert resource_type(pod("p", gpu=gpu)) == expected


def bound(name, user, shares, models=("A100",)):
    return pod(name, phase="bound", node="n1", user=user, started_at=T0,
               gpu=GpuAsk(count=len(shares), models=list(models)),
               gpus=[GpuShare(gpu=f"gpu{i}", milli=m, model=model) for i, (model, m) in enumerate(shares)])


@pytest.mark.parametrize("shares, models, expected", [
    # GPUs of a known model: charged to that model and to "gpu"
    ([("A100", 1000), ("A100", 1000)], ("A100",), {"A100": 2000, "gpu": 2000}),
    # the event names no model: the one model the pod asked for
    ([("", 500)], ("A100",), {"A100": 500, "gpu": 500}),
    # no model named, several asked: unknown model, charged to "gpu" once
    ([("", 1000)], ("A100", "V100"), {"gpu": 1000}),
])
def test_running_pod_charges_the_model_and_the_generic_type(shares, models, expected):
    usage = usage_by_resource_type([running_pod(bound("x", "alice", shares, models))])
    assert {kind: amount for (_, kind), amount in usage.items() if kind not in ("cpu", "memory")} == expected


def test_a_pod_without_named_gpus_is_charged_its_ask():
    asked = pod("x", phase="running", node="n1", gpu=GpuAsk(count=2, models=["V100"]))
    assert running_pod(asked).gpus == {"V100": 2000}


def test_two_users_a100_pods_are_ordered_by_their_a100_usage():
    # alice holds 1 A100, bob 3 A100s; bob holds nothing else, alice holds 4
    # T4s (more GPUs in all): on A100 alice comes first, whatever their total.
    # The A100 pods' events name no model, as the bridge reports them.
    running = RunningPods()
    running.apply("c1", bound("a1", "alice", [("", 1000)]))
    running.apply("c1", bound("a2", "alice", [("T4", 1000)] * 4, models=("T4",)))
    running.apply("c1", bound("b1", "bob", [("", 1000)] * 3))
    book = FairShareBook(adjust_time_s=DAY)
    scores = {(s.user, s.resource_type): s.score
              for s in book.advance_running(T0 + timedelta(days=1), running.of_cluster("c1"))}
    # first-run rule: usage · (1 − e^−1) after one T → alice A100 632, bob A100 1896
    assert scores[("alice", "A100")] < scores[("bob", "A100")]
    assert scores[("alice", "gpu")] > scores[("bob", "gpu")]   # 5000 vs 3000 milli-GPU in all

    queue = SchedulingQueue()
    for minutes, name, user in ((0, "bob-a100", "bob"), (1, "alice-a100", "alice")):  # bob's is older
        wanted = pod(name, user=user, gpu=GpuAsk(count=1, models=["A100"]), created_at=T0 + timedelta(minutes=minutes))
        queue.add(wanted, scores.get((user, resource_type(wanted)), 0.0))   # the lookup placement makes
    assert [e.pod.name for e, _ in queue.cycle()] == ["alice-a100", "bob-a100"]
    assert all(e.score > 0 for e in queue.entries.values()), "the lookup found the A100 scores"


def test_explain_shows_the_resource_type_when_it_has_the_pod():
    decision = PlacementDecision(decision_id="d1", namespace="default", name="p", outcome="pending",
                                 reason="0/3 nodes fit")
    asked = pod("p", gpu=GpuAsk(count=1, models=["A100"]))
    assert "  resource type: A100" in describe(decision, asked).splitlines()
    assert "resource type" not in describe(decision)


def test_the_kept_usage_totals_are_the_pods_usage_whatever_comes_and_goes():
    # scoring's periodic update reads these totals instead of every pod; one pod key comes and goes
    rng, running = random.Random(7), RunningPods()
    for step in range(3000):
        cluster, name, user = rng.choice(["c1", "c2"]), f"p{rng.randrange(60)}", rng.choice(["alice", "bob", "eve"])
        shares = [(rng.choice(["", "A100", "T4"]), rng.choice([250, 1000])) for _ in range(rng.randrange(3))]
        event = rng.choice([
            lambda: bound(name, user, shares),
            lambda: pod(name, phase="running", node="n1", user=user, cpu_milli=rng.randrange(0, 4000)),
            lambda: pod(name, phase="pending", user=user),
            lambda: pod(name, phase="deleted", node="n1", user=user),
            lambda: pod(name, phase="running", node="n1", user=user, foreign=True)])()
        running.apply(cluster, event)
        if step % 100 == 0:
            for c in ("c1", "c2"):
                assert running.usage(c) == usage_by_resource_type(running.of_cluster(c))
    assert running.usage("c1") and running.usage("c1") == usage_by_resource_type(running.of_cluster("c1"))
