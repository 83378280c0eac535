"""`tidal demo` end to end: the sample cluster simulated behind the
Kubernetes API server, every service and the real bridge as processes of an
embedded stack; the bridge is the only publisher of pod lifecycle events
and bind results, the auditor and the node agents' audits find nothing
(how long it takes is the demo's to report, not a test's). And the scenario `make demo`
simulates next meets every expectation it states (else `make demo` fails),
and its recording replays exactly."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conftest import make_bus, patience
from tidal_bus.embedded import EmbeddedNats
from tidal_schemas import NodeAction
from tidal_simulator.replay_exact import ExactReplay, read_recording, replay_acting_stages, replay_recording
from tidal_simulator.replay_run import LiveStreams
from tidal_cli import main as cli


def test_the_demo_runs_through_the_bridge_with_no_violation(tmp_path, capsys):
    code = cli.main(["demo", "--data-dir", str(tmp_path / "demo"), "--timeout", str(patience(90))])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line and line.split()[0] in ("pod.lifecycle", "bind.result", "cpu.assignment", "placement.decision")}
    # stream -> [events, published by..., "expected"]
    assert int(rows["pod.lifecycle"][0]) > 0 and rows["pod.lifecycle"][1:] == ["bridge", "expected"]
    assert int(rows["bind.result"][0]) > 0 and rows["bind.result"][1:] == ["bridge", "expected"]
    assert rows["cpu.assignment"][1:] == ["simulator", "expected"]  # the node agents of the simulated machines
    assert "invariant violations: 0" in out and "node agents: audit violations 0" in out
    placed = [line for line in out.splitlines() if line.startswith("team-") and "pending" not in line]
    assert len(placed) >= 8, out


def test_the_demo_scenario_meets_every_expectation(tmp_path, capsys):
    scenario = Path(__file__).resolve().parents[1] / "examples" / "demo" / "scenario.yaml"
    code = cli.main(["simulate", "--scenario", str(scenario), "--data-dir", str(tmp_path / "simulate")])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    checked = [line.strip() for line in out.splitlines() if line.strip().startswith(("[ok]", "[FAIL]"))]
    assert len(checked) == 5 and all(line.startswith("[ok]") for line in checked), checked
    assert "invariant violations: 0" in out
    asyncio.run(_the_recording_replays_exactly(tmp_path / "simulate" / "nats"))


async def _the_recording_replays_exactly(store: Path) -> None:
    """Replayed with its own settings, every decision and action is the
    recorded one (what `tidal replay` checks; its CLI: test_replay.py). Then
    the samples of the node remediation first froze a pod on, emptied of
    pods: the replayed actions and allocatables of that node differ."""
    server = EmbeddedNats(store).start()
    try:
        async with make_bus(server.url, "sim") as bus:
            recording = await read_recording(LiveStreams(bus), "sim")
    finally:
        server.stop()
    exact = replay_recording(recording, "sim", "sim")
    await replay_acting_stages(recording, "sim", exact)
    assert exact.equal and exact.decisions > 0, exact.describe()
    assert exact.actions["oversell"] > 0 and exact.actions["remediation"] > 0, exact.describe()
    freeze = next(e.payload for e in recording.acting_log
                  if isinstance(e.payload, NodeAction) and e.payload.kind == "freeze")
    for key, (envelope, crc) in list(recording.inputs.items()):
        if key[0] == "node.metrics" and envelope.payload.node == freeze.node:
            emptied = envelope.payload.model_copy(update={"pods": []})
            recording.inputs[key] = (envelope.model_copy(update={"payload": emptied}), crc)
    verdict = ExactReplay("sim")
    await replay_acting_stages(recording, "sim", verdict)
    assert not verdict.equal
    assert any(stage in d and f"node {freeze.node}" in d for d in verdict.divergences
               for stage in ("oversell", "remediation")), verdict.divergences
