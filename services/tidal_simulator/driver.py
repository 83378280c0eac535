"""Releasing pods to the pipeline and waiting for it (lock-step).

- `run_arrive_only`: the GPU-fragmentation protocol — pods in the given
  order, `batch` at a time, each batch waited for (running, decided
  pending, or `decision_timeout_s` passed) before the next, so the arrived
  load of every log line is well defined; nothing leaves. One tick per
  batch publishes the samples of the nodes that changed.
- `run_timed`: pods arrive at their `arrive_s`; each tick releases the pods
  due together, waits for their decisions or for the pipeline to go quiet
  (a pod placement holds back is decided later, and bound whenever that
  comes), advances the clock (departures, samples) and waits for the
  pipeline to settle — or, on the real-time clock, for the next tick.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence

from .frag_ledger import FragLedger, pod_shape
from .recorder import ArrivalLine

Progress = Callable[[str], None]
QUIET_AFTER_RELEASE_S = 0.25  # no decision for this long after a release: placement holds the pod back


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def release_batch(sim, keys: Sequence[str], until_quiet: bool = False) -> None:
    """Release `keys` together and wait until each is settled or timed out
    (with `until_quiet`, also stop waiting once the pipeline went quiet: a
    pod held back in placement's queue gets no decision until room appears);
    log an arrival line per pod."""
    futures = [await sim.release(k) for k in keys]
    if futures and until_quiet:
        waiting = asyncio.ensure_future(asyncio.wait(futures))
        quiet = asyncio.ensure_future(sim.settled(timeout=sim.settings.decision_timeout_s,
                                                  quiet_s=max(sim.settings.settle_quiet_s, QUIET_AFTER_RELEASE_S)))
        await asyncio.wait([waiting, quiet], return_when=asyncio.FIRST_COMPLETED)
        for task in (waiting, quiet):
            task.cancel()
    elif futures:
        await asyncio.wait(futures, timeout=sim.settings.decision_timeout_s)
    for key, future in zip(keys, futures):
        if not future.done():
            sim.waiters.pop(key, None)
            sim.record.last_decision.setdefault(key, ("undecided", "no decision in time", {}))
        log_arrival(sim, key)


def log_arrival(sim, key: str) -> None:
    ledger = sim.ledger
    if ledger is None:
        return
    pod = sim.model.pods[key]
    arrived = (sim.record.arrivals[-1].arrived if sim.record.arrivals else 0) + pod.request.gpu.total_milli
    sim.record.arrivals.append(ArrivalLine(key, arrived, ledger.allocated_milli, ledger.idle_milli,
                                           ledger.frag_milli, pod.phase == "running"))


def attach_ledger(sim, shapes=None) -> FragLedger:
    """Start keeping the cluster GPU figures (after pre-placed pods started)."""
    sim.ledger = FragLedger(sim.model, shapes if shapes is not None else
                            [pod_shape(p) for p in sim.workload.pods])
    return sim.ledger


async def run_arrive_only(sim, order: Sequence[str], *, batch: int = 1, progress_every: int = 0,
                          progress: Progress = stderr_progress, samples: int = 200) -> None:
    """The arrive-only protocol over `order` (pod keys); see the module docstring."""
    if sim.ledger is None:
        attach_ledger(sim)
    sample_every = max(len(order) // max(samples, 1), 1)
    capacity = max(sim.ledger.capacity_milli, 1)
    for start in range(0, len(order), batch):
        keys = order[start:start + batch]
        await release_batch(sim, keys)
        await sim.tick()
        done = start + len(keys)
        if done // sample_every != start // sample_every or done == len(order):
            sim.sample_tick()
        if progress_every and (done // progress_every != start // progress_every or done == len(order)):
            last = sim.record.arrivals[-1] if sim.record.arrivals else None
            running = sum(1 for a in sim.record.arrivals if a.placed)
            if last is not None:
                progress(f"simulate: {done}/{len(order)} pods, {running} running, arrived "
                         f"{100 * last.arrived / capacity:.1f} %, GPU allocated {100 * last.allocated / capacity:.1f} %")
    await sim.settled()


async def run_timed(sim, *, forever: bool = False, progress_every: int = 0,
                    progress: Progress = stderr_progress) -> None:
    """Arrivals by time, tick by tick, until the workload's duration (and,
    with `forever`, on: ticks keep sampling until the task is cancelled)."""
    if sim.ledger is None:
        attach_ledger(sim)
    queue = sorted((p for p in sim.workload.pods if p.node is None), key=lambda p: (p.arrive_s, p.key))
    end = sim.workload.duration_s
    i, released = 0, 0
    sim.sample_tick()
    while True:
        t = sim.clock.t_s
        due = []
        while i < len(queue) and queue[i].arrive_s <= t:
            due.append(queue[i].key)
            i += 1
        if due:  # pods due together arrive together, as in a cluster
            await release_batch(sim, due, until_quiet=True)
        if progress_every and due and (released + len(due)) // progress_every != released // progress_every:
            progress(f"simulate: t={t:.0f} s, {released + len(due)}/{len(queue)} pods released")
        released += len(due)
        if not forever and end is not None and t >= end:
            break
        if sim.clock.real_time:
            await asyncio.sleep(sim.clock.next_tick_wall_s())
        await sim.tick()
        if not sim.clock.real_time:
            await sim.settled()
        sim.sample_tick()
    await sim.settled()
