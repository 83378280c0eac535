"""Running a what-if replay: read the live streams, re-run placement in a
sandbox namespace, collect its decisions.

The live bus is only ever read, through `LiveStreams`, which has no way to
publish. Everything the replay writes (the recorded inputs, the sandbox
placement's decisions, the binds that answer them) goes to a namespace of
its own on the same broker, removed at the end unless kept. Pods are
released lock-step: each group of pods that arrived together waits for the
sandbox's decisions (placed or pending) before the next input, so the order
placement sees is the recorded order, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from tidal_bus import Bus, StartAt
from tidal_schemas import BindResult, Envelope, PlacementDecision, PlacementDecisions, PodLifecycle, SchemaError
from tidal_schemas.fence import DecisionFence
from tidal_schemas.streams import STREAMS

from .driver import QUIET_AFTER_RELEASE_S
from .replay_compare import Placed
from .replay_plan import INPUT_STREAMS, Recorded, ReplayPlan

Progress = Callable[[str], None]


class LiveStreams:
    """The live bus, read-only: the replay must never publish into it."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    def read(self, stream: str) -> AsyncIterator[tuple[Any, Envelope[Any] | SchemaError]]:
        return self._bus.read(stream, StartAt.earliest())


async def read_recorded(live: LiveStreams, cluster: str) -> tuple[list[Recorded], list[Recorded]]:
    """(placement's inputs, the decision log) of `cluster`, as recorded."""
    async def one(stream: str) -> list[Recorded]:
        return [Recorded(stream, raw.position, event, raw.stored_at) async for raw, event in live.read(stream)
                if not isinstance(event, SchemaError) and event.cluster == cluster]
    inputs = [r for stream in INPUT_STREAMS for r in await one(stream)]
    return inputs, await one("placement.decision")


def sandbox_namespace(live_namespace: str) -> str:
    """A fresh namespace beside the live one (never equal to it)."""
    return f"{live_namespace[:25]}-replay-{secrets.token_hex(4)}"


@dataclass
class ReplayOutcome:
    placed: dict[str, Placed] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)  # pods left pending, with the reason


class SandboxBinder:
    """Plays the cluster for the sandbox: every placed decision that counts
    is bound at once (bind result, then the pod bound), and whoever waits
    for a pod's decision is told."""

    def __init__(self, bus: Bus, plan: ReplayPlan) -> None:
        self.bus, self.plan = bus, plan
        self.outcome = ReplayOutcome()
        self.waiters: dict[str, asyncio.Future[None]] = {}
        self.last_change = 0.0

    def expect(self, key: str) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self.waiters[key] = future
        return future

    async def follow(self) -> None:
        fence = DecisionFence()
        async for _, event in self.bus.read("placement.decision", StartAt.earliest(), follow=True):
            for decision in () if isinstance(event, SchemaError) else event.payload.items:
                if fence.admit(decision) and decision.outcome != "fence":
                    await self._on_decision(decision, event)

    async def _on_decision(self, d: PlacementDecision, envelope: Envelope[PlacementDecisions]) -> None:
        key = d.event_key()
        pod = self.plan.pods.get(key)
        if pod is None or key not in self.plan.recorded:
            return
        self.last_change = asyncio.get_running_loop().time()
        if d.outcome == "placed" and d.node:
            self.outcome.placed[key] = Placed(d.node, tuple((g.gpu, g.milli) for g in d.gpus))
            self.outcome.why.pop(key, None)
            await self.bus.publish(BindResult(decision_id=d.decision_id, namespace=d.namespace, name=d.name,
                                              node=d.node, ok=True), cause=envelope, discriminator=d.decision_id)
            bound = pod.model_copy(update={"phase": "bound", "node": d.node, "numa_cpus": dict(d.numa_cpus),
                                           "gpus": list(d.gpus)})
            await self.bus.publish(bound, cause=envelope, discriminator=f"bound/{d.decision_id}")
        else:
            self.outcome.why[key] = d.reason or "pending"
        waiter = self.waiters.pop(key, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def drive(sandbox: Bus, plan: ReplayPlan, binder: SandboxBinder, *, decision_timeout_s: float,
                quiet_s: float, progress: Progress, held_back: Callable[[str], bool] = lambda key: False,
                batch_window_s: float = 0.1, progress_every: int = 100) -> None:
    """Publish the plan into the sandbox, lock-step on every group of pods
    that arrived together (so placement's queue orders them as it did),
    waiting for each pod's decision (a pod placement holds back gets none:
    `held_back` says so); then give the pods still queued `quiet_s` of no
    decisions."""
    for envelope in plan.initial:
        await sandbox.publish_envelope(envelope)
    released = 0
    for group in arrival_groups(plan.timeline, batch_window_s):
        keys = [r.envelope.payload.event_key() for r in group if is_arrival(r)]
        waiters = {key: binder.expect(key) for key in keys}
        for r in group:
            await sandbox.publish_envelope(r.envelope)
        for key, waiter in waiters.items():
            if not await settled(waiter, binder, decision_timeout_s, lambda: held_back(key)):
                binder.outcome.why.setdefault(key, f"no decision within {decision_timeout_s:g}s")
        before, released = released, released + len(keys)
        if progress_every and released // progress_every > before // progress_every:
            progress(f"replay: {released}/{len(plan.arrivals)} pods released, {len(binder.outcome.placed)} placed")
    loop = asyncio.get_running_loop()
    binder.last_change = loop.time()
    while loop.time() - binder.last_change < quiet_s:
        await asyncio.sleep(0.05)


def is_arrival(r: Recorded) -> bool:
    p = r.envelope.payload
    return isinstance(p, PodLifecycle) and p.phase == "pending" and not p.node


def arrival_groups(timeline: list[Recorded], window_s: float) -> list[list[Recorded]]:
    """The timeline in groups: a run of arrivals within `window_s` of the
    run's first is one group; any other event is a group of its own."""
    groups: list[list[Recorded]] = []
    for r in timeline:
        last = groups[-1] if groups else None
        if last and is_arrival(r) and is_arrival(last[0]) and (r.time - last[0].time).total_seconds() <= window_s:
            last.append(r)
        else:
            groups.append([r])
    return groups


async def settled(waiter: asyncio.Future[None], binder: SandboxBinder, timeout_s: float,
                  held_back: Callable[[], bool]) -> bool:
    """Wait for a released pod's decision, or until placement holds it back
    or has gone quiet (no decision for QUIET_AFTER_RELEASE_S). False on
    timeout."""
    loop = asyncio.get_running_loop()
    released_at = loop.time()
    while not waiter.done():
        now = loop.time()
        if now - released_at > timeout_s:
            return False
        if held_back() or now - max(binder.last_change, released_at) > QUIET_AFTER_RELEASE_S:
            return True
        await asyncio.wait([waiter], timeout=0.02)
    return True


async def remove_sandbox(sandbox: Bus) -> None:
    """Drop every stream of the sandbox namespace."""
    for spec in STREAMS.values():
        await sandbox.backend.delete_stream(spec)


async def run_sandbox(url: str, sandbox_ns: str, cluster: str, plan: ReplayPlan, overrides: dict[str, Any], *,
                      bus_options: dict[str, Any], decision_timeout_s: float, quiet_s: float, keep: bool,
                      progress: Progress, batch_window_s: float = 0.1) -> ReplayOutcome:
    """Placement (with `overrides`) in `sandbox_ns`, fed `plan`; its outcome."""
    from tidal_placement import PlacementService
    from tidal_placement import PlacementSettings

    settings = PlacementSettings(bus_url=url, namespace=sandbox_ns, cluster=cluster, http_host="127.0.0.1",
                                 http_port=0, **overrides)
    sandbox = Bus.from_url(url, namespace=sandbox_ns, cluster=cluster, source="replay", **bus_options)
    async with sandbox:
        binder = SandboxBinder(sandbox, plan)
        service = PlacementService(settings)
        follower = asyncio.create_task(binder.follow(), name="replay-binder")
        placement = asyncio.create_task(service.run(), name="replay-placement")
        try:
            await _until(lambda: cluster in service.active, placement, 60.0,
                         "the sandbox placement did not take the lead")
            await drive(sandbox, plan, binder, decision_timeout_s=decision_timeout_s, quiet_s=quiet_s,
                        progress=progress, held_back=lambda key: service.held_back(cluster, key),
                        batch_window_s=batch_window_s)
        finally:
            service.stop()
            await asyncio.wait_for(placement, 30)
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            if not keep:
                await remove_sandbox(sandbox)
    return binder.outcome


async def _until(predicate: Callable[[], bool], task: asyncio.Task, timeout_s: float, failure: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if task.done():
            task.result()  # surfaces why the service ended
            raise RuntimeError(f"{failure}: it stopped")
        if loop.time() > deadline:
            raise TimeoutError(f"{failure} within {timeout_s:g}s")
        await asyncio.sleep(0.05)
