"""Kill -9 each central service in the middle of a simulated run, restart it,
and check the run ends exactly as an uninterrupted one with the same seed.

The real stack (`tidal_cli.stack.Stack`: every service its own process) on
the session's nats-server, driven by the simulator in this process over
`tests/fixtures/faults/scenario.yaml` — a run whose outcomes are forced
whatever the timing (see the file). Each service is killed where it has
work in hand:

- placement right after a pod arrives, while the simulator waits for its
  decision (the decision must come from the restarted replica);
- scoring, oversell and remediation right after the tick that matters to
  them is sampled (scoring mid-run, oversell on the memory spike that
  taints and evicts, remediation on the hotspot that freezes), so the
  samples are in their hands or queued for them.

The simulator runs lock-step: after each tick it waits until every stage
has handled what the tick set off (no consumer group has anything left on
the broker), and at the kill until the restarted service is ready and has
handled its backlog — the cluster's clock does not race ahead of a few
seconds' outage, and a busy machine cannot change the story. Then: nobody
lost, nobody placed twice, no CPU or GPU held twice, each eviction and
freeze decided once, every sample answered, and the final state (pod →
node, NUMA CPUs, CPU ids, GPUs, frozen; taints; every action carried out)
equal to the uninterrupted run's.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from builders import figures_in
from conftest import ROOT, make_bus, patience
from sim_checks import pinning_problems
from tidal_bus import StartAt
from tidal_bus.subjects import encode_durable, nats_stream_name
from tidal_cli import simulate_cmd
from tidal_cli.stack import Stack
from tidal_schemas.fence import DecisionFence
from tidal_schemas.streams import STREAMS, stream
from tidal_simulator.run import simulate
from tidal_topology.audit import KINDS

SCENARIO = ROOT / "tests" / "fixtures" / "faults" / "scenario.yaml"
SERVICES = ["placement", "scoring", "oversell", "remediation"]
CLUSTER = "sim"
# What `tidal simulate` sets (every action carried out); a crash noticed within seconds (a dead member's
# partitions move after 2 s, what it had in hand comes back after 3 s, not 6 and
# 30); a quick leader hand-over. A long permit timeout: no pod of the scenario
# waits, and an elected placement must not sit out its idle wait before claiming.
ENV = {"TIDAL_SCORING_PERIOD_S": "1", "TIDAL_SCORING_SETTLE_TIME": "2m", "TIDAL_LOG_LEVEL": "INFO",
       "TIDAL_BUS_ACK_WAIT_S": "3", "TIDAL_BUS_MEMBER_TTL_S": "2",
       "TIDAL_PLACEMENT_TAKEOVER_SETTLE_S": "1", "TIDAL_PLACEMENT_PERMIT_TIMEOUT_S": "600",
       **simulate_cmd.ACTIONS_ENABLED}
RECOVERY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Kill:
    """Kill `service` as pod `pod` arrives, or as the tick that reaches
    scenario time `tick_s` is sampled (see `kill_hook`)."""

    service: str
    pod: str | None = None
    tick_s: float | None = None


KILLS = {
    "placement": Kill("placement", pod="web/job"),
    "scoring": Kill("scoring", tick_s=60.0),
    "oversell": Kill("oversell", tick_s=100.0),
    "remediation": Kill("remediation", tick_s=80.0),
}


@dataclass
class Run:
    """What one run left: the simulator (model and record), the events on
    the bus, and how long the killed service took to be back and caught up."""

    sim: object
    report: dict
    events: dict[str, list] = field(default_factory=dict)  # stream -> its events, in order
    recovered_s: float | None = None
    killed_at: str = ""
    in_hand: int = 0  # events the killed service had queued or in hand, not done


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    simulate_cmd.add(parser.add_subparsers())
    return parser.parse_args(["simulate", *argv])


async def backlogs(bus, groups: list[str]) -> dict[str, int]:
    """Per consumer group, the messages it has not handled yet over every
    stream and partition: waiting on the broker plus handed out and not
    acknowledged (what a crashed member had in hand comes back after ack_wait)."""
    js, totals = bus.backend.js, dict.fromkeys(groups, 0)
    prefixes = {f"{encode_durable(group)}_": group for group in groups}
    for name in STREAMS:
        try:
            consumers = await js.consumers_info(nats_stream_name(bus.backend.namespace, stream(name)))
        except Exception:  # a stream not created yet holds nothing
            continue
        for info in consumers:
            group = next((g for prefix, g in prefixes.items() if info.name.startswith(prefix)), None)
            if group is not None:
                totals[group] += info.num_pending + info.num_ack_pending
    return totals


async def backlog(bus, group: str) -> int:
    return (await backlogs(bus, [group]))[group]


def lock_step(sim, bus) -> None:
    """After each tick, wait until every stage has handled what the tick
    set off (scoring, oversell, remediation and the simulator's own groups
    have nothing left, twice in a row), so how busy the machine is cannot
    change what happens next — as the cluster's clock would not race ahead
    of its control plane."""
    tick = sim.tick
    groups = [f"{name}-{CLUSTER}" for name in SERVICES if name != "placement"] + [f"simulator-{sim.run_id}"]

    async def idle() -> bool:
        for _ in range(2):
            if any((await backlogs(bus, groups)).values()):
                return False
            await sim.settled()
        return True

    async def tick_in_lock_step() -> float:
        t = await tick()
        await wait_until_async(idle, RECOVERY_TIMEOUT_S, f"the pipeline to handle the tick at {t:.0f} s")
        return t

    sim.tick = tick_in_lock_step


def ready(service) -> bool:
    """Whether the restarted service is ready; a restart that died is not waited for."""
    code = service.process.poll()
    assert code is None, f"{service.name} exited ({code}) after its restart; its log: {service.log_path}"
    return service.ready()


async def crash_and_recover(stack: Stack, bus, name: str) -> float:
    """kill -9 `name`, start it again, and wait until it is ready and its
    groups have nothing left to handle; the seconds that took."""
    started = time.monotonic()
    stack.kill(name)
    service = stack.restart(name)
    await wait_until_async(lambda: asyncio.to_thread(ready, service), RECOVERY_TIMEOUT_S, f"{name} ready again")
    if name != "placement":  # placement reads without a group; its proof is the decision awaited
        async def drained() -> bool:
            return await backlog(bus, f"{name}-{CLUSTER}") == 0

        await wait_until_async(drained, RECOVERY_TIMEOUT_S, f"{name} to handle its backlog")
    return time.monotonic() - started


async def wait_until_async(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + patience(timeout)
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {patience(timeout):g}s waiting for {what}")
        await asyncio.sleep(0.1)


def kill_hook(kill: Kill):
    """A hook that wraps the simulator's `release` / `tick` so the kill
    happens there and the run goes on once the service is back (lock-step).

    The service is frozen (SIGSTOP) just before the pod arrives or the tick
    is sampled, so at the SIGKILL it surely has that work queued or in hand,
    not done: the restarted process must do it, once."""

    def install(sim, stack: Stack, bus, run: Run) -> None:
        release, tick = sim.release, sim.tick
        name = kill.service

        async def release_then_kill(key: str):
            if key != kill.pod or run.recovered_s is not None:
                return await release(key)
            stack.service(name).process.send_signal(signal.SIGSTOP)
            started = time.monotonic()
            future = await release(key)
            run.killed_at = f"with {key} just arrived"
            await crash_and_recover(stack, bus, name)
            run.in_hand = 0 if future.done() else 1  # no decision from the frozen leader
            # the simulator waits for this pod's decision, which the restarted leader must make
            await asyncio.wait_for(asyncio.shield(future), RECOVERY_TIMEOUT_S)
            run.recovered_s = time.monotonic() - started
            return future

        async def tick_then_kill() -> float:
            if kill.tick_s is None or sim.clock.t_s + sim.clock.tick_s < kill.tick_s or run.recovered_s is not None:
                return await tick()
            stack.service(name).process.send_signal(signal.SIGSTOP)
            t = await tick()
            run.killed_at = f"with the samples of t={t:.0f} s just published"
            run.in_hand = await backlog(bus, f"{name}-{CLUSTER}")
            run.recovered_s = await crash_and_recover(stack, bus, name)
            return t

        sim.release, sim.tick = release_then_kill, tick_then_kill

    return install


async def simulate_on_stack(nats_url: str, data_dir: Path, hook=None) -> Run:
    """The scenario on a fresh stack of the four services over `nats_url`;
    `hook(sim, stack, bus, run)` is called once the services know the
    cluster, before the first pod arrives."""
    namespace = f"fk{uuid.uuid4().hex[:10]}"
    args = parse("--scenario", str(SCENARIO), "--bus", nats_url, "--namespace", namespace, "--cluster", CLUSTER,
                 "--decision-timeout", str(RECOVERY_TIMEOUT_S), "--progress", "0")
    plan = simulate_cmd.build_plan(args)
    # As `tidal simulate` on its own stack: settled means oversell answered every sample;
    # wait for it (a restarted oversell answers late) rather than give up after 10 s.
    plan.settings = plan.settings.model_copy(update={"expect_allocatable": True, "settle_max_s": RECOVERY_TIMEOUT_S})
    stack = Stack(data_dir, bus_url=nats_url, namespace=namespace, cluster=CLUSTER, services=SERVICES,
                  extra_env=ENV)
    holder: dict = {}
    try:
        stack.start()
        await asyncio.to_thread(stack.wait_ready, 60)
        async with make_bus(nats_url, namespace, cluster=CLUSTER) as bus:
            run = Run(sim=None, report={})
            base_warmup = simulate_cmd._metrics_warmup(stack, 4)

            async def warmup(sim) -> None:
                holder["sim"] = sim
                await base_warmup(sim)
                if hook is not None:
                    hook(sim, stack, bus, run)
                lock_step(sim, bus)

            result = await asyncio.wait_for(simulate(plan, warmup=warmup, progress=lambda line: None), patience(240))
            stack.check_alive()
            run.sim, run.report = holder["sim"], result.report
            for name in ("placement.decision", "node.action", "node.metrics", "score.node", "node.allocatable"):
                run.events[name] = [e async for _, e in bus.read(name, StartAt.earliest())]
            return run
    finally:
        await asyncio.to_thread(stack.stop)


def assert_same_end(run: Run, baseline: Run) -> None:
    """The final states are equal; if not, say where they differ."""
    got, want = final_state(run), final_state(baseline)
    differing = {key: (got["pods"].get(key), want["pods"].get(key)) for key in set(got["pods"]) | set(want["pods"])
                 if got["pods"].get(key) != want["pods"].get(key)}
    assert not differing, f"pods (this run, uninterrupted): {differing}"
    assert got["taints"] == want["taints"]
    assert got["happened"] == want["happened"], (sorted(set(got["happened"]) ^ set(want["happened"])),
                                                 Counter(got["happened"]) - Counter(want["happened"]))


def final_state(run: Run) -> dict:
    """Where every pod is and what it holds, taints, and every action carried out."""
    model = run.sim.model
    agents = run.sim.agents
    pods = {key: (p.phase, p.node, tuple(sorted(p.numa_cpus.items())),
                  agents.held(p.node, key) if p.phase == "running" else (),
                  tuple(sorted((g.gpu, g.milli) for g in p.gpus)), model.frozen(p))
            for key, p in sorted(model.pods.items())}
    done = sorted((h.kind, h.node, h.pod) for h in run.sim.record.timeline
                  if h.kind in ("taint", "untaint", "evict", "freeze", "thaw", "set-cpuset", "placed", "deleted"))
    return {"pods": pods, "taints": {n: sorted(t) for n, t in sorted(model.taints.items())}, "happened": done}


def check_invariants(run: Run) -> None:
    model, record = run.sim.model, run.sim.record
    # the auditor, over every stream of the run
    assert run.report["invariants"]["violations"] == 0, run.report["invariants"]["lines"]
    # no pod lost: every pod that arrived runs or has finished / was evicted, none undecided
    assert all(p.phase in ("running", "deleted") for p in model.pods.values()), \
        {k: p.phase for k, p in model.pods.items() if p.phase not in ("running", "deleted")}
    assert not [k for k, (outcome, *_rest) in record.last_decision.items() if outcome == "undecided"]
    # none placed twice: one counted placement per pod, one successful bind, no refused bind
    fence, placed = DecisionFence(), Counter()
    for event in run.events["placement.decision"]:
        placed.update(d.event_key() for d in event.payload.items if fence.admit(d) and d.outcome == "placed")
    assert placed and max(placed.values()) == 1, placed
    assert record.bind_results["failed"] == 0 and record.bind_results["ok"] == len(placed)
    # no CPU or GPU held twice at the end
    cpus, gpus = Counter(), Counter()
    for p in model.pods.values():
        if p.phase == "running":
            cpus.update((p.node, c) for c in run.sim.agents.held(p.node, p.key))
            gpus.update({(p.node, g.gpu): g.milli for g in p.gpus})
    assert not cpus or max(cpus.values()) == 1, cpus
    # the machines as the node agents left them: exclusive pods pinned, shared ones kept off their CPUs
    assert pinning_problems(run.sim) == []
    assert run.report["node_agents"]["audit_violations"] == dict.fromkeys(KINDS, 0)
    assert not gpus or max(gpus.values()) <= 1000, gpus
    # each eviction and freeze decided once (an unanswered action sent again keeps its action id)
    decided: dict[tuple, set[str]] = {}
    for e in run.events["node.action"]:
        if e.payload.kind in ("evict", "freeze"):
            decided.setdefault((e.payload.requested_by, e.payload.kind, e.payload.pod), set()).add(e.payload.action_id)
    assert decided and all(len(ids) == 1 for ids in decided.values()), decided
    # nothing lost on the way: every sample was scored, and oversell answered every one
    samples = {e.id for e in run.events["node.metrics"]}
    for output in ("score.node", "node.allocatable"):
        ids = {figures.sample for figures in figures_in(run.events[output])}
        assert samples <= ids, f"{len(samples - ids)} samples without {output}"


@pytest.fixture(scope="module")
async def baseline(nats_server, tmp_path_factory) -> Run:
    return await simulate_on_stack(nats_server.url, tmp_path_factory.mktemp("base"), None)


async def test_uninterrupted_run_meets_the_scenario(baseline):
    assert [e["expect"] for e in baseline.report["expectations"] if not e["ok"]] == []
    check_invariants(baseline)


@pytest.mark.parametrize("service", list(KILLS))
async def test_kill_9_and_restart_ends_as_the_uninterrupted_run(baseline, nats_server, tmp_path, service):
    run = await simulate_on_stack(nats_server.url, tmp_path, kill_hook(KILLS[service]))
    assert run.recovered_s is not None, f"{service} was never killed"
    print(f"{service}: killed {run.killed_at}, {run.in_hand} event(s) in hand; "
          f"back and caught up in {run.recovered_s:.1f} s")
    assert run.in_hand > 0, "the kill must catch the service with work to do"
    check_invariants(run)
    assert_same_end(run, baseline)
    assert [e["expect"] for e in run.report["expectations"] if not e["ok"]] == []
