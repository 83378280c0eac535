"""`tidal replay`: cutting a recording at a window (pure), the comparison's
arithmetic, and a what-if end to end: a run recorded by the simulator with
the real placement service (best-fit) over a real nats-server, replayed
with best-fit (nothing differs: the replay is faithful) and with fgd (pods
go elsewhere), never writing to the live streams."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from builders import T0, pod
from conftest import ROOT, make_bus, patience, wait_until
from tidal_bus import StartAt
from tidal_cli import main as cli
from tidal_cli import replay_cmd, simulate_cmd
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_simulator.topology_builder import make_topology
from tidal_runtime.journal import digest
from tidal_schemas import GpuAsk, NodeAction, NodeScore, NodeScores, encode, make_envelope
from tidal_schemas.placement import GpuShare
from tidal_schemas.streams import STREAMS, partition_for, stream
from tidal_simulator.replay_compare import Placed, compare, summarise
from tidal_simulator.replay_plan import Point, Recorded, Window, build_plan, resolve_window
from tidal_simulator.replay_exact import read_recording, replay_recording
from tidal_simulator.replay_run import LiveStreams
from tidal_simulator.run import simulate

SMALL = ROOT / "examples" / "openb_small"


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


def rec(stream: str, position: int, payload, seconds: float) -> Recorded:
    return Recorded(stream, position, make_envelope(payload, cluster="c1", source="test", time=at(seconds)))


def bound(p, node: str, gpus=()):
    return p.model_copy(update={"phase": "bound", "node": node,
                                "gpus": [GpuShare(gpu=g, milli=m) for g, m in gpus]})


def recording():
    """Two nodes; a pod bound before t=10, one pending at t=10, two arriving
    after, one of which the recording bound; a taint before, one inside."""
    old, waiting, p1, p2 = pod("old"), pod("waiting"), pod("p1"), pod("p2")
    return [
        rec("node.topology", 1, make_topology("n1", gpus=2), 0),
        rec("node.topology", 2, make_topology("n2", gpus=2), 1),
        rec("node.topology", 3, make_topology("n1", gpus=4), 2),  # n1 re-published: the latest counts
        rec("node.action", 1, NodeAction(action_id="a1", node="n2", kind="taint", taint_key="tidal.dev/stop-scheduling",
                                         reason="hot"), 3),
        rec("pod.lifecycle", 1, old, 4),
        rec("pod.lifecycle", 2, bound(old, "n1"), 5),
        rec("pod.lifecycle", 3, waiting, 6),
        rec("pod.lifecycle", 4, p1, 11),
        rec("pod.lifecycle", 5, bound(p1, "n2", [("gpu0", 1000)]), 12),
        rec("node.action", 2, NodeAction(action_id="a2", node="n2", kind="untaint", taint_key="tidal.dev/stop-scheduling",
                                         reason="cool"), 13),
        rec("pod.lifecycle", 6, p2, 14),
        rec("pod.lifecycle", 7, pod("ext", phase="bound", node="n2"), 15),  # bound by another scheduler
        rec("pod.lifecycle", 8, pod("old", phase="deleted"), 16),
        rec("pod.lifecycle", 9, pod("late"), 30),
    ]


# -- the plan (pure) --------------------------------------------------------------

def test_the_window_start_becomes_the_initial_state():
    plan = build_plan(recording(), Window(start=at(10), end=at(20)))
    initial = [(e.type, e.key) for e in plan.initial]
    # latest topology per node, the taint in force, the pod bound at the start
    assert sorted(initial) == [("node.action", "n2"), ("node.topology", "n1"), ("node.topology", "n2"),
                               ("pod.lifecycle", "default/old")]
    assert len(plan.nodes["n1"].gpus) == 4
    assert list(plan.bound_at_start) == ["default/old"]


def test_a_batch_of_node_scores_is_state_node_by_node():
    """A batch holds several nodes' scores: each node's latest score is its
    state at the start, whichever batch it came in."""
    same = [n for n in (f"n{i}" for i in range(200)) if partition_for(n, stream("score.node").partitions)
            == partition_for("n1", stream("score.node").partitions)][:3]
    first, second, third = same

    def score(node: str, load: float) -> NodeScore:
        return NodeScore(node=node, load=load, sampled_at=at(0))
    events = [rec("score.node", 1, NodeScores.of(score(first, 0.1), score(second, 0.2)), 1),
              rec("score.node", 2, NodeScores.of(score(third, 0.3), score(first, 0.4)), 2)]
    plan = build_plan(events, Window(start=at(10), end=at(20)))
    latest = {e.key: [(s.node, s.load) for s in e.payload.items] for e in plan.initial}
    assert latest == {first: [(first, 0.4)], second: [(second, 0.2)], third: [(third, 0.3)]}
    assert len({e.id for e in plan.initial}) == 3


def test_arrivals_are_replayed_and_recorded_binds_become_the_answer():
    plan = build_plan(recording(), Window(start=at(10), end=at(20)))
    # pending at the start first, then in arrival order; "late" is after the window
    assert plan.arrivals == ["default/waiting", "default/p1", "default/p2"]
    assert plan.recorded["default/p1"].node == "n2" and plan.recorded["default/p1"].gpus == (("gpu0", 1000),)
    assert plan.recorded["default/waiting"].node is None and plan.recorded["default/p2"].node is None
    timeline = [(r.envelope.type, r.envelope.key, getattr(r.envelope.payload, "phase", getattr(r.envelope.payload, "kind", "")))
                for r in plan.timeline]
    assert timeline == [
        ("pod.lifecycle", "default/waiting", "pending"),
        ("pod.lifecycle", "default/p1", "pending"),  # its recorded bind is dropped: the replay binds its own
        ("node.action", "n2", "untaint"),
        ("pod.lifecycle", "default/p2", "pending"),
        ("pod.lifecycle", "default/ext", "bound"),  # someone else's pod is part of the world
        ("pod.lifecycle", "default/old", "deleted"),
    ]
    assert plan.deleted == {"default/old"}


def test_an_open_window_replays_everything():
    plan = build_plan(recording(), Window())
    assert plan.initial == []
    assert plan.arrivals == ["default/old", "default/waiting", "default/p1", "default/p2", "default/late"]
    assert plan.recorded["default/old"].node == "n1"


def test_sequences_resolve_to_pod_event_times():
    events = recording()
    window = resolve_window(Point(sequence=4), Point(sequence=6), events)
    assert (window.start, window.end) == (at(11), at(14))
    assert resolve_window(Point(time=at(3)), None, events) == Window(at(3), None)
    with pytest.raises(ValueError, match=r"no pod event at or after sequence 99 \(pod.lifecycle positions: 1..9\)"):
        resolve_window(Point(sequence=99), None, events)
    with pytest.raises(ValueError, match="ends .* before it starts"):
        resolve_window(Point(time=at(9)), Point(time=at(2)), events)


# -- the comparison (pure) ---------------------------------------------------------

def test_comparison_counts_and_end_state_arithmetic():
    plan = build_plan(recording(), Window(start=at(10), end=at(20)))
    for key in ("default/waiting", "default/p1", "default/p2"):
        plan.pods[key] = plan.pods[key].model_copy(update={"gpu": GpuAsk(count=1)})
    replay = {"default/p1": Placed("n1", (("gpu1", 1000),)), "default/p2": Placed("n1", (("gpu2", 1000),))}
    c = compare(plan, replay, {"default/waiting": "no room"})
    assert (c.same, len(c.moved), len(c.only_recorded), len(c.only_replay), c.neither) == (0, 1, 0, 1, 1)
    assert c.moved == [("default/p1", "n2", "n1")] and c.differs == 2
    # capacity: n1 4 GPUs + n2 2 GPUs = 6000 milli; "old" was deleted, "ext" holds no GPU
    assert c.recorded.gpu_allocation_pct == pytest.approx(100 * 1000 / 6000, abs=0.01)
    assert c.replay.gpu_allocation_pct == pytest.approx(100 * 2000 / 6000, abs=0.01)
    # CPU: 8 + 8 CPUs; ext (1000) + the side's placed pods (1000 each)
    assert c.recorded.cpu_allocation_pct == pytest.approx(100 * 2000 / 16000, abs=0.01)
    assert c.replay.cpu_allocation_pct == pytest.approx(100 * 3000 / 16000, abs=0.01)
    assert (c.recorded.placed, c.replay.placed) == (1, 2)


def test_fragmentation_is_zero_when_every_gpu_is_whole_or_full():
    plan = build_plan(recording(), Window(start=at(10), end=at(20)))
    for key in plan.pods:  # every pod asks one whole GPU: that is the typical pod
        plan.pods[key] = plan.pods[key].model_copy(update={"gpu": GpuAsk(count=1)})
    # a free whole GPU fits the typical pod, so nothing is fragmented
    assert summarise(plan, {"default/p1": Placed("n1", (("gpu0", 1000),))}).frag_milli == 0
    # a half-used GPU is too small for a whole-GPU pod: its 500 free milli are fragmented
    assert summarise(plan, {"default/p1": Placed("n1", (("gpu0", 500),))}).frag_milli == 500


# -- the command line --------------------------------------------------------------

@pytest.mark.parametrize("item, message", [
    ("placement.gpu-strategy=bogus", "--set placement.gpu-strategy: Value error, unknown GPU strategy 'bogus'"),
    ("scoring.period-s=3", "only placement settings can be replayed"),
    ("placement.no-such=1", "placement has no setting 'no-such'"),
    ("placement.namespace=live", "placement has no setting 'namespace'"),
    ("gpu-strategy", "expected SERVICE.SETTING=VALUE"),
])
def test_bad_overrides_are_one_line_and_exit_2(item, message, capsys):
    assert cli.main(["replay", "--from", "earliest", "--set", item]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_window_points_parse():
    now = T0
    assert replay_cmd.parse_point("earliest", now) is None
    assert replay_cmd.parse_point("42", now) == Point(sequence=42)
    assert replay_cmd.parse_point("-30m", now) == Point(time=T0 - timedelta(minutes=30))
    assert replay_cmd.parse_point("2026-01-01T00:00:05Z", now) == Point(time=at(5))
    assert replay_cmd.parse_point("-1.5h", now) == Point(time=T0 - timedelta(minutes=90))
    with pytest.raises(replay_cmd.CliError, match=r"a time with a timezone, e.g. 2026-01-01T00:00:05Z"):
        replay_cmd.parse_point("2026-01-01T00:00:05", now)
    with pytest.raises(replay_cmd.CliError, match="expected 'earliest', a sequence number, or an ISO time or -30m"):
        replay_cmd.parse_point("yesterday", now)


# -- end to end over a real nats-server ---------------------------------------------

def simulate_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    simulate_cmd.add(parser.add_subparsers())
    return parser.parse_args(["simulate", *argv])


async def stream_ends(url: str, namespace: str) -> dict[str, int]:
    """The last position of every stream of a namespace (0 when empty)."""
    ends = {}
    async with make_bus(url, namespace) as bus:
        for name in STREAMS:
            last = 0
            async for raw, _ in bus.read(name, StartAt.earliest()):
                last = max(last, raw.position)
            ends[name] = last
    return ends


@pytest.fixture(scope="module")
async def recorded_run(nats_server, tmp_path_factory):
    """40 pods of the bundled openb sample, arrive-only, placed by the real
    placement service with best-fit and bound by the simulator."""
    namespace = "rec" + tmp_path_factory.mktemp("r").name[-6:].replace("_", "")
    args = simulate_args("--nodes", str(SMALL / "nodes.csv"), "--pods", str(SMALL / "pods.csv"), "--arrive-only",
                         "--seed", "3", "--limit", "40", "--bus", nats_server.url, "--namespace", namespace)
    plan = simulate_cmd.build_plan(args)
    placement = PlacementService(PlacementSettings(bus_url=nats_server.url, namespace=namespace, cluster="sim",
                                                   http_port=0, http_host="127.0.0.1", gpu_strategy="best-fit"))
    task = asyncio.create_task(placement.run())

    async def warmup(sim) -> None:
        await wait_until(lambda: "sim" in placement.active and len(placement.clusters["sim"].state.rows) == len(plan.workload.nodes),
                         timeout=30, what="placement leads and knows every node")
    try:
        result = await simulate(plan, warmup=warmup, progress=lambda line: None)
    finally:
        placement.stop()
        await task
    return namespace, result.report


async def run_replay(url: str, namespace: str, *overrides: str):
    args = cli.build_parser().parse_args(["replay", "--bus", url, "--namespace", namespace, "--cluster", "sim",
                                          "--from", "earliest", *[x for o in overrides for x in ("--set", o)]])
    start, end = replay_cmd.parse_point(args.start, T0), replay_cmd.parse_point(args.end, T0)
    exact, result = await replay_cmd._replay(args, start, end, replay_cmd.parse_overrides(args.overrides))
    assert exact.equal, exact.describe()  # every what-if starts from a recording its journal reproduces
    return result


async def recorded(url: str, namespace: str):
    async with make_bus(url, namespace) as bus:
        return await read_recording(LiveStreams(bus), "sim")


async def test_the_unchanged_replay_reproduces_every_decision_from_the_journal(nats_server, recorded_run):
    namespace, report = recorded_run
    before = await stream_ends(nats_server.url, namespace)
    args = cli.build_parser().parse_args(["replay", "--bus", nats_server.url, "--namespace", namespace,
                                          "--cluster", "sim", "--from", "earliest"])
    exact, result = await replay_cmd._replay(args, None, None, {})
    assert result is None  # no --set: no sandbox
    assert exact.equal and exact.members == 1 and exact.decisions >= report["pods"]["running"] > 0
    assert "every decision and action equal to the recording" in exact.describe()
    assert await stream_ends(nats_server.url, namespace) == before


async def test_an_altered_input_is_named_as_the_first_divergence(nats_server, recorded_run):
    namespace, _ = recorded_run
    recording = await recorded(nats_server.url, namespace)
    assert replay_recording(recording, "sim", namespace).equal
    # the inventory of the node the first pod was placed on, altered in the recording: the replay names it
    node = next(d.node for e in recording.log for d in e.payload.items if d.outcome == "placed")
    keys = [k for k, (e, _) in recording.inputs.items() if k[0] == "node.topology" and e.key == node]
    for key in keys:
        envelope, _ = recording.inputs[key]
        topo = envelope.payload
        altered = envelope.model_copy(update={"payload": topo.model_copy(update={"gpus": []})})
        recording.inputs[key] = (altered, digest(encode(altered)))
    verdict = replay_recording(recording, "sim", namespace)
    assert not verdict.equal
    [line] = verdict.divergences
    assert "input node.topology " in line and f"({node}) is not the event the replica read" in line
    # without the digest the journal noted, the decisions it changes are named instead
    recording.journal = [j.model_copy(update={"steps": [(op, t, a, b.split(" ")[0] if op == "read" else b)
                                                         for op, t, a, b in j.steps]}) for j in recording.journal]
    [line] = replay_recording(recording, "sim", namespace).divergences
    assert "decision" in line and "differs" in line and "recorded" in line and "replayed" in line


async def test_replaying_the_same_policy_reproduces_the_recording(nats_server, recorded_run):
    namespace, report = recorded_run
    before = await stream_ends(nats_server.url, namespace)
    result = await run_replay(nats_server.url, namespace, "placement.gpu-strategy=best-fit")
    c = result.comparison
    assert c.arrivals == 40 and c.recorded.placed == report["pods"]["running"]
    assert c.differs == 0 and c.same == c.recorded.placed
    assert c.replay == c.recorded and not result.invented and result.dropped == 0 and not result.explain
    assert await stream_ends(nats_server.url, namespace) == before  # the live streams were only read


async def test_replaying_fgd_shows_what_would_have_changed(nats_server, recorded_run):
    namespace, _ = recorded_run
    before = await stream_ends(nats_server.url, namespace)
    result = await run_replay(nats_server.url, namespace, "placement.gpu-strategy=fgd")
    c = result.comparison
    assert c.arrivals == 40 and c.differs > 0
    assert c.same + c.differs + c.neither == c.arrivals
    # both end states are summed from their own placements
    assert c.recorded.placed == c.same + len(c.moved) + len(c.only_recorded)
    assert c.replay.placed == c.same + len(c.moved) + len(c.only_replay)
    assert 0 < c.replay.gpu_allocation_pct <= 100 and c.replay.frag_milli >= 0
    assert result.to_json()["overrides"] == {"placement.gpu-strategy": "fgd"}
    # every pod that differs with both runs' decision, as `tidal explain` shows it
    moved, was, now = c.moved[0] if c.moved else (None, None, None)
    assert set(result.explain) == {pod for pod, *_ in (*c.moved, *c.only_recorded, *c.only_replay)}
    if moved:
        assert f"on {was}" in result.explain[moved]["baseline"] and f"on {now}" in result.explain[moved]["changed"]
    assert await stream_ends(nats_server.url, namespace) == before


def test_the_command_prints_both_runs_and_writes_the_report(nats_server, recorded_run, tmp_path):
    namespace, _ = recorded_run
    out = tmp_path / "replay.json"
    run = subprocess.run([str(Path(sys.executable).parent / "tidal"), "replay", "--bus", nats_server.url,
                          "--namespace", namespace, "--cluster", "sim", "--from", "earliest",
                          "--set", "placement.gpu-strategy=fgd", "--show", "3", "--report", str(out),
                          "--html", str(tmp_path / "replay.html")],
                         capture_output=True, text=True, timeout=patience(180))
    assert run.returncode == 0, run.stderr
    assert "every decision and action equal to the recording" in run.stdout  # the baseline holds
    assert "GPU allocation %" in run.stdout and "baseline" in run.stdout and "changed" in run.stdout
    report = json.loads(out.read_text())
    assert report["exact"]["equal"] and report["arrivals"] == 40
    page = (tmp_path / "replay.html").read_text()
    assert "every decision and action equal to the recording" in page and "against the unchanged run" in page
    assert all(pod in page for pod in report["explain"]) and report["differs"] == len(report["moved"]) + len(
        report["only_recorded"]) + len(report["only_replay"])


def test_an_empty_window_is_one_line_and_exit_2(nats_server, recorded_run, capsys):
    namespace, _ = recorded_run
    code = cli.main(["replay", "--bus", nats_server.url, "--namespace", namespace, "--cluster", "sim",
                     "--from", "2099-01-01T00:00:00Z"])
    err = capsys.readouterr().err
    assert code == 2 and "no pod arrived in the window" in err and err.count("\n") == 1


def test_the_brokers_clock_orders_events_stamped_by_different_clocks():
    # the simulator stamps simulated time (t=500 s) on a pod it played at broker time 2 s,
    # scoring stamps wall time (t=1 s) on a score stored at broker time 3 s
    from tidal_schemas import UserScore
    played = Recorded("pod.lifecycle", 1, rec("pod.lifecycle", 1, pod("p"), 500).envelope, stored_at=at(2))
    scored = Recorded("score.user", 1, rec("score.user", 1, UserScore(user="u", resource_type="cpu", score=0.5,
                                                                      usage=1.0, updated_at=T0, adjust_time_s=60), 1).envelope, stored_at=at(3))
    plan = build_plan([scored, played], Window(start=at(0)))
    assert [r.envelope.type for r in plan.timeline] == ["pod.lifecycle", "score.user"]
    assert plan.timeline[0].time == at(2)


def test_a_journal_with_a_gap_is_named_not_replayed():
    from tidal_placement import gather_journals
    from tidal_schemas import StageJournal

    events = [StageJournal(stage="placement", member="m1", seq=seq, steps=[("cycle", float(seq), "", "")])
              for seq in (0, 2)] + [StageJournal(stage="placement", member="m2", seq=0, settings={"a": 1})]
    journals = gather_journals(events)
    assert journals.problems == {"m1": "journal events missing (seq 1)"}
    assert journals.steps == {"m2": []} and journals.settings == {"m2": {"a": 1}}
