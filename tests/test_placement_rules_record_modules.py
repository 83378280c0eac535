"""Direct tests of the record and stage modules no other test imports:
`holdings` (what a pod holds from the latest of each stream),
`pod_records` (records kept in the least room), `leadership` (which
clusters a replica claims and leads), `stage` (placement as steps with no
clock), `replay` (the steps run again on a fresh stage) and
`replay_answers` (a what-if's answers). In-process: no bus, no broker."""

from __future__ import annotations

import pytest

from tidal_placement.holdings import Holding, PodRecord, bound_holding, decided_allocation
from tidal_placement.kept import KeptDecision, KeptPod
from tidal_placement.leadership import Leadership
from tidal_placement.pod_records import PodRecords
from tidal_placement.replay import Divergence, first_difference, gather, recorded_outputs, replay_member
from tidal_placement.replay_answers import Answers, held_as
from tidal_placement.settings import PlacementSettings
from tidal_placement.stage import PlacementStage
from tidal_placement.allocation import NONE_FLOATING, Allocation, Floating
from tidal_schemas import (BindResult, CpuAssignment, GpuAsk, GpuShare, PlacementDecision, PlacementDecisions,
                           Resources, StageJournal, make_envelope)
from tidal_schemas.fence import DecisionFence, fence_decision

from builders import pod
from placement_builders import node


def decision(node_="n1", decision_id="d1", uid="u1", cpu=2000, **fields) -> PlacementDecision:
    return PlacementDecision(decision_id=decision_id, namespace="default", name="p", uid=uid, outcome="placed",
                             node=node_, requests=Resources(cpu_milli=cpu, memory_mib=256), **fields)


def kept(phase="pending", key: str | None = None, **fields) -> KeptPod:
    return KeptPod.of(pod("p", phase=phase, uid=fields.pop("uid", "u1"), **fields), key)


# ---- holdings: rules 1–3 -------------------------------------------------------------------------------

def test_a_bound_pod_holds_what_the_cluster_says_even_against_a_decision():
    record = PodRecord("default/p", kept("bound", node="n2", cpu_milli=1000, numa_cpus={0: 1}),
                       KeptDecision.of(decision("n1")))
    assert record.holding() == Holding(Allocation.of("n2", 1000, 512, {0: 1}), NONE_FLOATING, bound=True)


def test_a_pending_pod_holds_its_live_decision_unless_its_bind_failed_or_it_was_for_another_uid():
    d = KeptDecision.of(decision("n1", numa_cpus={1: 2}, gpus=[GpuShare(gpu="gpu0", milli=500)]))
    record = PodRecord("default/p", kept(), d)
    # rule 2: the requests the decision booked (2000 m, 256 MiB), its NUMA CPUs and GPU
    assert record.holding() == Holding(Allocation.of("n1", 2000, 256, {1: 2}, {"gpu0": 500}))
    assert not record.waits()
    record.failed = frozenset({"d1"})
    assert record.holding() is None and record.waits()  # rule 3: nothing, back in the queue
    other = PodRecord("default/p", kept(uid="u2"), d)  # a pod of the same name, created again
    assert other.live_decision() is None and other.holding() is None


def test_bound_holding_floats_what_was_not_read_back():
    # 2 GPUs and 3 exclusive CPUs asked, none named on the pod: held as Floating((1000, 1000), 3)
    p = kept("bound", node="n1", cpu_milli=3000, exclusive_cpus=True, gpu=GpuAsk(count=2))
    assert bound_holding(p).floating == Floating((1000, 1000), 3)
    # the node agent's assignment for the decision it is bound by names the CPUs: nothing floats
    p = kept("bound", node="n1", cpu_milli=3000, exclusive_cpus=True, decision_id="d1")
    assignment = CpuAssignment(node="n1", pod="default/p", cpuset=[0, 1, 2], numa_cpus={1: 3}, decision_id="d1")
    held = bound_holding(p, assignment)
    assert held.floating == NONE_FLOATING and held.allocation.numa_cpus == ((1, 3),)
    # an assignment for another decision (or another node) is not the pod's
    assert bound_holding(p, assignment.model_copy(update={"decision_id": "d0"})).floating == Floating((), 3)
    assert bound_holding(p, assignment.model_copy(update={"node": "n9"})).floating == Floating((), 3)


def test_decided_allocation_books_the_pods_requests_when_the_decision_carries_none():
    old = KeptDecision.of(decision(cpu=0).model_copy(update={"requests": Resources()}))
    assert decided_allocation(old, kept(cpu_milli=1500)) == Allocation.of("n1", 1500, 512)
    assert decided_allocation(old, None) == Allocation.of("n1", 0, 0)


def test_settle_forgets_what_only_a_pending_pod_reads():
    record = PodRecord("default/p", kept("running", node="n1"), KeptDecision.of(decision()), frozenset({"d0"}),
                       tries=2)
    record.settle()
    assert (record.decision, record.failed, record.tries) == (None, frozenset(), 0)
    assert record.holds_only_its_pod()


# ---- pod_records ---------------------------------------------------------------------------------------

def test_a_record_holding_only_its_pod_is_kept_as_the_pod():
    records = PodRecords()
    key = "default/p"
    records.set_pod(key, kept(key=key))
    assert records.pod(key) is not None and list(records.records()) == []  # the pod alone
    view = records.get(key)
    view.tries = 5  # a record made for the asking: changing it changes nothing kept
    assert records.get(key).tries == 0
    record = records.edit(key)
    record.tries = 1
    records.keep(key, record)
    assert list(records.records()) == [record]  # it holds more than its pod: kept as a record
    record.tries = 0
    records.keep(key, record)
    assert list(records.records()) == [] and key in records and len(records) == 1
    assert records.key_of("default/p") is key and records.key_of("default/q") == "default/q"
    assert dict(records.pods()) == {key: records.pod(key)}
    records.pop(key)
    assert key not in records and records.get(key) is None


# ---- leadership -----------------------------------------------------------------------------------------

def test_leadership_claims_fences_then_leads_when_its_own_reads_back():
    lead = Leadership(settle_s=3.0)
    assert lead.claims(["c1"], {}, 0.0) == []  # not elected
    lead.assigned(gained=True, lost=False, now=10.0)
    assert lead.claiming
    # no fence yet: claim epoch 1; a fence by another leader at epoch 4: epoch 5, only once settled
    assert lead.claims(["c1"], {}, 10.0) == [("c1", 1)]
    assert lead.claims(["c1"], {}, 10.5) == []  # claimed already
    fences = {"c2": DecisionFence(4, "other")}
    assert lead.claims(["c2"], fences, 11.0) == []  # 11 − 10 < 3: another replica may still lead
    assert lead.claims(["c2"], fences, 13.0) == [("c2", 5)]
    lead.fence_read("c1", fence_decision(1, "me"), admitted=True, me="me")
    assert lead.active == {"c1"} and not lead.claiming
    lead.fence_read("c2", fence_decision(6, "other"), admitted=True, me="me")  # lost c2
    assert lead.active == {"c1"} and "c2" not in lead.claimed
    lead.assigned(gained=False, lost=True, now=20.0)
    assert lead.active == set() and lead.claims(["c1"], {}, 30.0) == []


# ---- stage, replay and its answers ----------------------------------------------------------------------

SETTINGS = PlacementSettings(gpu_strategy="best-fit")


def envelope(payload):
    return make_envelope(payload, cluster="c1", source="test")


def run_live():
    """A stage leads c1 and places one pod; (inputs by stream and id, journal steps, outputs)."""
    stage = PlacementStage(SETTINGS, "m1")
    inputs, outputs = {}, []

    def read(e, t):
        inputs[(e.type, e.id)] = (e, "")
        stage.read(e, t)

    read(envelope(node("n1", (4, 4))), 1.0)
    stage.elected(True, False, 2.0)
    fences = [(c, e) for c, e in stage.claim(3.0) if c == "c1"]  # (the settings' own cluster is claimed too)
    assert [(c, [d.outcome for d in e.items]) for c, e in fences] == [("c1", ["fence"])]
    outputs += [list(e.items) for _, e in fences]
    read(envelope(fences[0][1]), 4.0)  # our fence read back: we lead c1
    assert stage.active == {"c1"}
    read(envelope(pod("p", uid="u1", cpu_milli=2000)), 5.0)
    outputs += list(stage.decide("c1", 6.0))
    return inputs, stage.journal.drain()["c1"], outputs


def test_the_stage_places_and_a_replay_of_its_journal_decides_the_same():
    inputs, steps, outputs = run_live()
    placed = outputs[-1][0]
    assert (placed.outcome, placed.node, placed.leader, placed.epoch) == ("placed", "n1", "m1", 1)
    replayed = replay_member("m1", steps, SETTINGS, "c1", inputs)
    assert replayed.divergence is None and replayed.steps == len(steps)
    assert replayed.outputs == outputs
    assert first_difference("m1", steps, replayed, outputs) is None
    # a recorded decision on another node: the first difference names the event (1: after the fence), pod and field
    changed = [*outputs[:-1], [placed.model_copy(update={"node": "n9"})]]
    divergence = first_difference("m1", steps, replayed, changed)
    assert "decision 1 for default/p differs (node: recorded 'n9', replayed 'n1')" in divergence.what
    assert first_difference("m1", steps, replayed, outputs[:-1]).what.endswith(
        f"{len(outputs) - 1} decision events recorded, {len(outputs)} replayed")


def test_a_replay_stops_at_an_input_the_recording_no_longer_has():
    inputs, steps, _ = run_live()
    pod_input = next(k for k in inputs if k[0] == "pod.lifecycle")
    del inputs[pod_input]
    replayed = replay_member("m1", steps, SETTINGS, "c1", inputs)
    assert replayed.divergence is not None and "is not in the recording" in replayed.divergence.what
    assert replayed.divergence.describe().startswith(f"replica m1, journal step {replayed.divergence.step} (t=")


def test_gather_orders_each_replicas_journal_and_names_a_gap():
    parts = [StageJournal(stage="placement", member="m1", seq=s, steps=[("cycle", float(s), "", "")],
                          settings={"x": s}) for s in (1, 0)]
    parts += [StageJournal(stage="placement", member="m2", seq=s, steps=[]) for s in (0, 2)]
    journals = gather(parts)
    assert journals.steps["m1"] == [("cycle", 0.0, "", ""), ("cycle", 1.0, "", "")]
    assert journals.settings["m1"] == {"x": 0}  # the first event's
    assert journals.problems == {"m2": "journal events missing (seq 1)"}


def test_recorded_outputs_are_the_members_own():
    mine, theirs = PlacementDecisions.of(fence_decision(1, "m1")), PlacementDecisions.of(fence_decision(2, "m2"))
    assert recorded_outputs([envelope(mine), envelope(theirs)], "m1") == [list(mine.items)]
    assert Divergence("m1", 3, 1.5, "what").describe() == "replica m1, journal step 3 (t=1.500): what"


def test_answers_translate_a_bind_result_to_the_replays_decision():
    recorded = decision("n1", "d-recorded")
    answers = Answers("m1", recorded=[[recorded]])
    mine = decision("n2", "d-replayed")
    answers.took([mine])  # the replay took its own decision for the same pod at the same step
    result = BindResult(decision_id="d-recorded", namespace="default", name="p", node="n1", ok=True)
    [answered] = answers.answer(envelope(result))
    assert (answered.payload.decision_id, answered.payload.node) == ("d-replayed", "n2")
    # a bind result of a decision the replay has no twin for is dropped
    stray = result.model_copy(update={"decision_id": "d-other"})
    assert answers.answer(envelope(stray)) == [] and answers.dropped == 1
    # the pod bound where the recording placed it is bound where the replay placed it
    bound = pod("p", phase="bound", node="n1", uid="u1")
    [as_replayed] = answers.answer(envelope(bound))
    assert as_replayed.payload.node == "n2"
    assert held_as(bound, mine).node == "n2"
    other = envelope(node("n3", (4,)))
    assert answers.answer(other) == [other]  # what is not an answer stays as recorded


def test_a_decision_without_a_recorded_twin_is_bound_at_once():
    answers = Answers("m1", recorded=[])
    pending = pod("p", uid="u1")
    answers.answer(envelope(pending))  # remembered, to bind it
    result, bound = answers.bound_at_once([decision("n2", "d-new")], "c1")
    assert result.payload.ok and result.payload.decision_id == "d-new"
    assert (bound.payload.phase, bound.payload.node) == ("bound", "n2")
    assert answers.invented == {"default/p"}
