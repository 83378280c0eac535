"""The scheduling cycle of one cluster (the leader's): the queue in fair-share
order (§C), each pod through the rules — an invalid pod is refused, then the
tenant's allowance (permissions, quota, groups, §B), then node/NUMA/GPU
choice (§A, §E) — and every decision taken assumed in the cache at once.

No I/O: `cycle` yields the decisions to publish, one at a time, so the caller
can stop as soon as it loses the lead. What the queue does with a pod
follows the attempt's status code (`pod_request.PLACED` …), never its text.

Every pod that cannot be placed gets a `pending` decision naming why — the
nodes filtered out by reason, a rule, or the better pod it is held back
behind — which the bridge writes on the pod (`PodScheduled=False`, a
`FailedScheduling` event). It is published when the reason changes (which
filters or which rule stopped the pod: the counts of nodes filtered out
move with every pod placed, and are brought up to date by the repeat), and
again, unchanged, on an attempt at least `repeat_s` after the last one
published: a retry is news to whoever counts attempts on the pod, but not
at the pace of every cycle. "Held back" is said only to a pod that has said
nothing yet: one that fits nowhere keeps that reason while it waits its turn.

With a joint strategy (`gpu_joint`), the pods due in a pass are decided in
windows: at the first pod of a window the strategy plans the next `window`
due pods together, and the pass goes on in the plan's order, each pod
through the same rules and the same `assume` as when deciding one by one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tidal_schemas import PlacementDecision, PlacementDecisions, derived_id

from .cache import ClusterCache
from .decide import decide
from .gpu_joint import JointStrategy, per_pod
from .kept import PodLike
from .pod_request import ERROR, PLACED, UNRESOLVABLE, WAIT, Placement, PodRequest, placement_decision
from .queue import Entry
from .tenancy import allowance, charge

log = logging.getLogger("tidal.placement")


def place(cache: ClusterCache, pod: PodLike, usage: dict[str, dict[str, int]], strategy: Any) -> Placement:
    """One attempt for one pod against the cache as it is."""
    if pod.invalid_reason:
        return Placement(False, reason=f"invalid pod: {pod.invalid_reason}", refused=True)
    allowed = allowance(cache.state, pod, cache.tenants.get(pod.tenant), cache.groups.get(pod.tenant),
                        usage.get(pod.tenant, {}))
    if allowed.reason:
        return Placement(False, reason=allowed.reason, refused=allowed.refused)
    return decide(cache.state, PodRequest.from_pod(pod), strategy, allowed=allowed.gpus, nodes=allowed.nodes)


def gist(placement: Placement) -> tuple:
    """What a pending decision says, less the counts of nodes filtered out,
    which move with nearly every pod placed: which filters stopped the pod,
    or the rule's words."""
    return (placement.code, tuple(sorted(placement.filtered)) if placement.filtered else placement.reason)


def attempt_of(cache: ClusterCache, entry: Entry) -> str:
    """Which attempt for which pod a decision is, for its id: the pod's uid
    too, as a pod deleted and made again under its name (a StatefulSet's)
    starts from no tries, and its decisions must not take the ids of the
    first pod's (a node agent would read one as the other's, redelivered)."""
    return f"{entry.pod.uid}/{cache.tries(entry.key)}/{entry.attempts}"


def cycle(cache: ClusterCache, strategy: Any, now: float,
          attempted: Callable[[str], None] = lambda code: None,
          repeat_s: float | None = None,
          traced: Callable[[str, bool], dict[str, str]] = lambda key, placed: {}) -> Iterator[PlacementDecision]:
    """Try every queued pod that may place now; yield each decision to publish
    (placed ones; pending ones whose reason changed, or tried again `repeat_s`
    or more after the last published; None: never repeated). `attempted` is
    told each attempt's status code (a pod held back: once per hold);
    `traced(pod key, placed)` gives the fields naming the trace a decision
    continues (`PodTraces.fields`)."""
    queue, state, fence = cache.queue, cache.state, cache.fence
    queue.expire_waits(now)
    # Waiting and refused pods are tried again only when room, holdings or a
    # tenant's configuration may have changed (or a permit expired above), each
    # after its back-off; a new pending pod alone changes none of these.
    if cache.room_changed:
        queue.room_appeared()
        cache.room_changed = False
    queue.rescore({e.key: cache.score(e.pod) for e in queue.entries.values()})
    # Tenant usage is needed only for quotas and groups; most clusters have neither.
    usage = cache.tenant_usage() if cache.governed() else {}
    nodes = len(state.rows)
    log_of = f"placement/{fence.epoch}/{fence.leader}"  # whose decision log the ids belong to
    passes = queue.cycle()
    one, planned = per_pod(strategy), {}
    for position in range(len(passes)):
        entry, held_back = passes[position]
        if queue.entries.get(entry.key) is not entry:
            continue  # placed, bound or deleted by events read while earlier decisions were published
        if isinstance(strategy, JointStrategy) and held_back is None and entry.key not in planned \
                and queue.due(entry, now):
            planned = plan_next_window(cache, strategy, passes, position, now)
            entry = passes[position][0]
        if held_back is not None:
            if entry.reason == held_back:
                continue
            attempted(WAIT)
            entry.reason = held_back
            if entry.announced is not None:
                # It said why it is pending already (it fits nowhere), and that still
                # holds: saying "held back" now and the old reason again at its next
                # try would flip its condition at every permit period.
                continue
            entry.announced, entry.said = now, (WAIT, held_back)
            decision_id = derived_id(log_of, PlacementDecisions.TYPE, entry.key,
                                     f"{attempt_of(cache, entry)}/held-back")
            yield placement_decision(entry.pod, Placement(False, reason=held_back), decision_id,
                                     epoch=fence.epoch, leader=fence.leader, queue_position=position,
                                     fair_share_score=entry.score, nodes=nodes, **traced(entry.key, False))
            continue
        if not queue.due(entry, now):
            continue
        pod = entry.pod
        placement = planned.pop(entry.key, None) or place(cache, pod, usage, one)
        decision_id = derived_id(log_of, PlacementDecisions.TYPE, entry.key, attempt_of(cache, entry))
        extra: dict[str, Any] = dict(epoch=fence.epoch, leader=fence.leader, queue_position=position,
                                     fair_share_score=entry.score)
        if placement.code == PLACED:
            outcome = state.assume(entry.key, placement.allocation)
            attempted(PLACED if outcome.ok else ERROR)
            if not outcome.ok:  # ERROR: the policy chose what the cache refuses; next cycle tries again
                log.error("assume of %s failed: %s", entry.key, outcome.reason)
                continue
            extra["gpus"] = [dict(gpu=gpu, milli=milli, model=cache.gpu_model.get(gpu, ""))
                             for gpu, milli in placement.allocation.gpus]
            charge(usage.setdefault(pod.tenant, {}), pod, ((g["model"], g["milli"]) for g in extra["gpus"]))
        else:
            attempted(placement.code)
            said = gist(placement)
            changed = said != entry.said
            if placement.code == UNRESOLVABLE:  # a rule, not room: no wait, no pod held back behind it
                queue.refuse(entry.key, placement.reason, dict(placement.filtered), now)
            else:
                queue.wait(entry.key, placement.reason, dict(placement.filtered), now)
            repeat = repeat_s is not None and entry.announced is not None and now - entry.announced >= repeat_s
            if not changed and not repeat:
                continue  # the same reasons: said already, and not long ago
            entry.announced, entry.said = now, said
            extra["nodes"] = nodes
        decision = placement_decision(pod, placement, decision_id, **extra,
                                      **traced(entry.key, placement.code == PLACED))
        if placement.code == PLACED:
            cache.placed(decision, pod, now)
        yield decision


def plan_next_window(cache: ClusterCache, strategy: JointStrategy, passes: list[tuple[Entry, str | None]],
                     position: int, now: float) -> dict[str, Placement | None]:
    """Plan the window of due pods that starts at `position` and put its pods
    in the plan's order in the places of `passes` they held; what the plan
    placed, by pod key (every pod: planned, so no window starts inside it)."""
    queue = cache.queue
    at = [i for i in range(position, len(passes)) if passes[i][1] is None
          and queue.entries.get(passes[i][0].key) is passes[i][0] and queue.due(passes[i][0], now)][:strategy.window]
    window = [passes[i][0] for i in at]
    if len(window) < 2:
        return {entry.key: None for entry in window}
    requests = [PodRequest.from_pod(e.pod) for e in window]
    one = per_pod(strategy)

    def decider():
        return lambda j: place(cache, window[j].pod, cache.tenant_usage() if cache.governed() else {}, one)

    plan = strategy.plan(cache.state, requests, decider)
    for i, j in zip(at, plan.order):
        passes[i] = (window[j], None)
    return {e.key: plan.chosen.placed.get(j) for j, e in enumerate(window)}


def in_events(decisions: Iterable[PlacementDecision], size: int) -> Iterator[list[PlacementDecision]]:
    """`decisions`, `size` to an event (the last of a cycle may hold fewer),
    each list yielded as soon as it is full: the cycle decides on once its
    event is published."""
    taken: list[PlacementDecision] = []
    for decision in decisions:
        taken.append(decision)
        if len(taken) == size:
            yield taken
            taken = []
    if taken:
        yield taken
