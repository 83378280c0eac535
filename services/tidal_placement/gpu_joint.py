"""Joint placement of a window of pending pods (the `joint` GPU strategy).

The per-pod strategy decides pods one at a time, each on the cluster its
predecessors left. Deciding a window of pods together can do better: a big
pod decided before the shares that would split its node, a pod that only
one GPU model admits before the pods any model admits. `plan_window` tries
the window's pods in several orders, each pod by pod with the per-pod
strategy on the scheduler cache itself (every trial's assumes undone),
then re-decides each placed pod once with the rest of its window in place
(`_refine`), and keeps the outcome that is best, lexicographically:

1. every pod the queue order places is placed (`keep_placed`; else an
   order may trade a small pod for a bigger one);
2. more milli-GPU placed;
3. less fragmentation added: Σ over the nodes the trial touched of
   F_n(after) − F_n(before), F the per-pod strategy's own measure (its
   target counts CPU through each shape's CPU fit);
4. the queue order on ties.

The queue order is always tried first and wins every tie, so a window is
never worse than deciding its pods one by one. What is published is a
trial's own placements, taken again by the caller through the cache's
`assume` — the check every decision passes — in the chosen order.

Cost: one per-pod decision per pod and order tried (`orders`), plus one
per placed pod for the sweep and the fragmentation of the rows touched.
The window (64 pods by default: on openb a wider window wins more, README
"Beyond one pod at a time") is a work bound, not a time budget, so the
same inputs give the same decisions on any machine. `measure` checks
another solver's answer (`gpu_joint_cpsat`) the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .cluster_state import ClusterState
from .gpu_candidates import Candidates, GpuStrategy, Scored
from .gpu_frag import FragModel
from .gpu_joint_taken import Taken, Trial, measure
from .gpu_workload import Shape, TargetWorkload, by_model
from .pod_request import PodRequest, Placement

__all__ = ["JointStrategy", "Trial", "WindowPlan", "measure", "new", "per_pod", "plan_window", "take_window"]

NAME = "joint"

# How a window may be ordered (besides the queue's order, always tried first).
ORDERS: dict[str, Callable[[PodRequest], tuple]] = {
    # the most GPU first, then the most CPU: first-fit decreasing
    "gpu": lambda p: (-p.gpu_count * p.gpu_milli, -p.gpu_count, -p.cpu_milli),
    # pods that few GPU models admit before those any model admits
    "constrained": lambda p: (not p.gpu_models, -p.gpu_count * p.gpu_milli, -p.cpu_milli),
    # the most CPU first (CPU-bound mixes strand GPUs for want of CPU)
    "cpu": lambda p: (-p.cpu_milli, -p.gpu_count * p.gpu_milli),
}

Decider = Callable[[int], Placement]  # decides window item i on the cache as it is now


@dataclass(frozen=True)
class WindowPlan:
    """The chosen trial, and the queue order's for comparison."""

    chosen: Trial
    queue: Trial
    tried: int

    @property
    def order(self) -> tuple[int, ...]:
        return self.chosen.order

    @property
    def improved(self) -> bool:
        return self.chosen is not self.queue


def plan_window(state: ClusterState, requests: Sequence[PodRequest], new_decider: Callable[[], Decider],
                frag: FragModel, orders: Sequence[str] = tuple(ORDERS), keep_placed: bool = True,
                sweeps: int = 1) -> WindowPlan:
    """Choose how to decide `requests` (see the module docstring).
    `new_decider()` is called once per trial; a decider decides on the
    cache as it is when called (a tenant's usage included)."""
    queue_order = tuple(range(len(requests)))
    queue = _trial(state, requests, queue_order, new_decider(), frag)
    required = frozenset(queue.placed) if keep_placed else frozenset()
    best, seen = queue, {queue_order}
    for name in orders:
        order = tuple(sorted(queue_order, key=lambda i: ORDERS[name](requests[i])))  # stable: queue order on ties
        if order in seen:
            continue
        seen.add(order)
        trial = _trial(state, requests, order, new_decider(), frag)
        if trial.key(required) < best.key(required):
            best = trial
    if sweeps:
        refined = _refine(state, requests, best, new_decider(), frag, sweeps)
        if refined.key(required) < best.key(required):
            best = refined
    return WindowPlan(best, queue, len(seen))


def _trial(state: ClusterState, requests: Sequence[PodRequest], order: tuple[int, ...], decide_one: Decider,
           frag: FragModel) -> Trial:
    """Decide `order` pod by pod on `state`, measure, undo."""
    taken = Taken(state, requests, frag)
    try:
        for i in order:
            taken.take(i, decide_one(i))
        return taken.trial(order)
    finally:
        taken.undo()


def _refine(state: ClusterState, requests: Sequence[PodRequest], start: Trial, decide_one: Decider,
            frag: FragModel, sweeps: int) -> Trial:
    """Local search from `start`: each placed pod in turn is lifted and
    decided again with the rest of its window in place; the move is kept
    when the window adds less fragmentation, else undone. Then pods left
    out are tried once on the result."""
    taken = Taken(state, requests, frag)
    try:
        for i in start.order:
            if i in start.placed:
                taken.take(i, start.placed[i])
        current = taken.added()
        for _ in range(sweeps):
            moved = False
            for i in [i for i in start.order if i in taken.placed]:
                old = taken.drop(i)
                new = decide_one(i)
                if new.ok and new.allocation != old.allocation and taken.take(i, new):
                    after = taken.added()
                    if after < current - 1e-6:
                        current, moved = after, True
                        continue
                    taken.drop(i)
                taken.take(i, old)
            if not moved:
                break
        for i in start.order:
            if i not in taken.placed:
                taken.take(i, decide_one(i))
        return taken.trial(start.order)
    finally:
        taken.undo()


@dataclass
class JointStrategy:
    """A registered GPU strategy: single pods are scored by `base` (so it
    stands anywhere a per-pod strategy does); a caller with several pods
    pending decides up to `window` of them through `plan` (the cycle, the
    openb replay)."""

    base: GpuStrategy
    frag: FragModel
    window: int = 64
    orders: tuple[str, ...] = tuple(ORDERS)
    keep_placed: bool = True
    sweeps: int = 1
    name: str = NAME

    @property
    def scores_cpu_pods(self) -> bool:
        return self.base.scores_cpu_pods

    def score(self, candidates: Candidates, shape: Shape) -> Scored:
        return self.base.score(candidates, shape)

    def plan(self, state: ClusterState, requests: Sequence[PodRequest],
             new_decider: Callable[[], Decider]) -> WindowPlan:
        return plan_window(state, requests, new_decider, self.frag, self.orders, self.keep_placed, self.sweeps)


def take_window(state: ClusterState, requests: Sequence[PodRequest], strategy: GpuStrategy | None,
                decide_one: Callable[[PodRequest], Placement]) -> dict[int, tuple[Placement, bool]]:
    """Decide `requests` — together when `strategy` is joint and they are
    several, else one by one — holding each placed pod on `state`: window
    index → (its placement, whether the cache took it). `decide_one`
    decides one request with the per-pod strategy on the state as it is."""
    order, planned = range(len(requests)), {}
    if isinstance(strategy, JointStrategy) and len(requests) > 1:
        plan = strategy.plan(state, requests, lambda: lambda j: decide_one(requests[j]))
        order, planned = plan.order, plan.chosen.placed
    taken = {}
    for j in order:
        choice = planned.get(j) or decide_one(requests[j])
        taken[j] = (choice, bool(choice.ok and state.assume(requests[j].key, choice.allocation).ok))
    return taken


def per_pod(strategy: GpuStrategy | None) -> GpuStrategy | None:
    """The strategy each single decision is made with: a joint strategy's
    base (whose score cache `decide` uses), any other strategy itself."""
    return strategy.base if isinstance(strategy, JointStrategy) else strategy


def new(workload: TargetWorkload | None = None, *, base: str = "fgd-cpu", window: int = 64,
        orders: str = "gpu+constrained+cpu", keep_placed: bool = True, sweeps: int = 1,
        solver: str = "local", **base_options) -> JointStrategy:
    """Factory for the registry: the per-pod `base` strategy (options passed
    on), a window of `window` pods, the orders to try joined by `+`;
    `solver="cpsat"` adds a CP-SAT pass (`gpu_joint_cpsat`)."""
    from .gpu_strategies import make_strategy  # the registry imports this module

    if workload is None:
        raise ValueError("joint needs a target workload (typical pod shapes)")
    if int(window) < 1:
        raise ValueError(f"joint window must be at least 1 pod, not {window!r}")
    names = tuple(filter(None, str(orders).split("+")))
    unknown = [n for n in names if n not in ORDERS]
    if unknown:
        raise ValueError(f"joint orders {unknown}: known {', '.join(ORDERS)}")
    if base == NAME:
        raise ValueError("joint cannot be its own base strategy")
    if solver not in ("local", "cpsat"):
        raise ValueError(f"joint solver {solver!r}: known local, cpsat")
    frag = FragModel(by_model(workload), no_access_is_fragment=False)
    joint = JointStrategy(make_strategy(base, workload, **base_options), frag, int(window), names, bool(keep_placed),
                          int(sweeps))
    if solver == "cpsat":
        from .gpu_joint_cpsat import with_cpsat
        return with_cpsat(joint)
    return joint

