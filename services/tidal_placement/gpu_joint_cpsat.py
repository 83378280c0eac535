"""A CP-SAT pass over each joint window (OR-Tools), `joint:solver=cpsat`:
the comparison issue 56 asks for with the local search. Off unless asked
for, and OR-Tools is not a dependency: 9.15 pins protobuf < 6.34 while
Tidal needs ≥ 7.35 (its generated device-plugin messages), so `pip install
ortools` beside Tidal to use it (it ran so with protobuf 7.36).

For a window, the joint strategy's own plan (`plan_window`) is the warm
start. On the cache as the warm start leaves it, each pod gets options:
a pod it placed, staying (option 0) or moving to one of the per-pod
strategy's `k` best other nodes; a pod it left out, being added to one of
them. Each option's Δ is the fragmentation it adds on the node it leaves
and the node it reaches, the rest as the warm start has it. Boolean
x[i, o] per option:

    Σ_o x[i, o] = 1 for a pod the warm start placed, ≤ 1 for the others
    Σ of the moves touching node n ≤ 1               for every node n
    maximise  W · Σ x · milli-GPU added − Σ x · round(Δ)

with W = 1 + Σ_i max_o |Δ| (GPU placed first, then fragmentation), the
warm start (every x[i, 0]) as the hint, one worker, a fixed seed and a
deterministic time limit (the same answer on any machine). As no two
chosen moves touch one node, each node's change is one move's, computed on
the node as it is: the objective is the answer's true fragmentation, and
every move fits alone, so the answer fits — which `gpu_joint.measure`
checks anyway (the cache's `assume`; refused whole if any pod does not
fit). It is kept only when it beats the warm start by `Trial.key`, the
joint strategy's own comparison. (A first model — per-pod deltas summed,
capacity per node and device, several moves to one node — was wrong about
its own answers: on openb seed 0 every answer it preferred measured worse
than the warm start.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .cluster_state import ClusterState
from .decide import decide
from .gpu_joint import Decider, JointStrategy, Trial, WindowPlan, measure
from .pod_request import Placement, PodRequest

K = 4  # other nodes per pod: the per-pod strategy's best
SECONDS = 0.2  # CP-SAT's deterministic time per window (its work measure, not the clock)


@dataclass
class Option:
    placement: Placement
    delta: int  # fragmentation the option adds to the warm start's, milli-GPU, rounded
    node: int  # the row it adds the pod to (−1: the pod stays where the warm start put it)


def options(state: ClusterState, requests: Sequence[PodRequest], warm: Trial, strategy, frag,
            k: int) -> list[list[Option]]:
    """Per window pod, on the cache as the warm start leaves it: for a pod
    the warm start placed, staying (Δ 0) then its move to each of the `k`
    best other nodes by the per-pod strategy; for one it left out, its
    addition to each of the `k` best nodes. Δ is the fragmentation the
    move adds on the node it leaves and the node it reaches, all else as
    the warm start has it — exact for any set of moves no two of which
    touch one node (the model's `touch` constraint)."""
    out: list[list[Option]] = [[] for _ in requests]
    models = tuple(state.models)

    def frag_at(row: int) -> float:
        s = slice(row, row + 1)
        return float(frag.node_frag(state.cpu_free[s], state.gpu_free[s], state.gpu_model[s], models)[0])

    def gain(i: int, placement: Placement) -> float | None:
        before = frag_at(placement.row)
        if not state.assume(requests[i].key, placement.allocation).ok:
            return None
        after = frag_at(placement.row)
        state.release(requests[i].key)
        return after - before

    held = [i for i in warm.order if i in warm.placed]
    for i in held:
        assert state.assume(requests[i].key, warm.placed[i].allocation).ok, "the warm start is a measured trial"
    try:
        for i in warm.order:
            mine = warm.placed.get(i)
            allowed = np.ones(state.size, dtype=bool)
            leave = 0.0
            if mine is not None:
                before = frag_at(mine.row)
                state.release(requests[i].key)
                leave = frag_at(mine.row) - before
                allowed[mine.row] = False
                out[i].append(Option(mine, 0, -1))
            for _ in range(k):
                choice = decide(state, requests[i], strategy, nodes=allowed)
                if not choice.ok:
                    break
                allowed[choice.row] = False
                d = gain(i, choice)
                if d is not None:
                    out[i].append(Option(choice, round(d + leave), choice.row))
            if mine is not None:
                state.assume(requests[i].key, mine.allocation)
    finally:
        for i in held:
            state.release(requests[i].key)
    return out


def solve(state: ClusterState, requests: Sequence[PodRequest], choices: list[list[Option]], warm: Trial,
          seconds: float) -> tuple[dict[int, Placement], str]:
    """The CP-SAT model of the module docstring: window index → placement, and the status."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    x = {(i, o): model.NewBoolVar(f"x{i}_{o}") for i, opts in enumerate(choices) for o in range(len(opts))}
    touch: dict[int, list] = {}  # node row → the moves that change it (at most one each)
    for i, opts in enumerate(choices):
        if not opts:
            continue
        picks = [x[(i, o)] for o in range(len(opts))]
        model.Add(sum(picks) == 1) if i in warm.placed else model.Add(sum(picks) <= 1)
        if i in warm.placed:  # leaving its node changes that node
            touch.setdefault(warm.placed[i].row, []).append(1 - x[(i, 0)])
        for o, opt in enumerate(opts):
            if opt.node >= 0:
                touch.setdefault(opt.node, []).append(x[(i, o)])
            model.AddHint(x[(i, o)], opt.node < 0)
    for terms in touch.values():
        if len(terms) > 1:
            model.Add(sum(terms) <= 1)
    weight = 1 + sum(max(abs(o.delta) for o in opts) for opts in choices if opts)
    milli = [0 if i in warm.placed else requests[i].gpu_count * requests[i].gpu_milli for i in range(len(requests))]
    model.Maximize(sum((weight * milli[i] - opt.delta) * x[(i, o)]
                       for i, opts in enumerate(choices) for o, opt in enumerate(opts)))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = seconds
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return {}, solver.StatusName(status)
    return ({i: choices[i][o].placement for (i, o), var in x.items() if solver.Value(var)},
            solver.StatusName(status))


@dataclass
class CpSatJoint(JointStrategy):
    """The joint strategy with a CP-SAT pass after its local search."""

    k: int = K
    seconds: float = SECONDS
    stats: dict = field(default_factory=lambda: {"windows": 0, "improved": 0, "refused": 0, "statuses": {}})

    def plan(self, state: ClusterState, requests: Sequence[PodRequest],
             new_decider: Callable[[], Decider]) -> WindowPlan:
        warm = super().plan(state, requests, new_decider)
        required = frozenset(warm.queue.placed) if self.keep_placed else frozenset()
        choices = options(state, requests, warm.chosen, self.base, self.frag, self.k)
        answer, status = solve(state, requests, choices, warm.chosen, self.seconds)
        self.stats["windows"] += 1
        self.stats["statuses"][status] = self.stats["statuses"].get(status, 0) + 1
        trial = measure(state, requests, warm.chosen.order, answer, self.frag) if answer else None
        if answer and trial is None:
            self.stats["refused"] += 1
        if trial is not None and trial.key(required) < warm.chosen.key(required):
            self.stats["improved"] += 1
            return WindowPlan(trial, warm.queue, warm.tried + 1)
        return warm


def with_cpsat(joint: JointStrategy, k: int = K, seconds: float = SECONDS) -> CpSatJoint:
    """A built joint strategy (its base, measure and options) with the CP-SAT pass."""
    try:
        import ortools  # noqa: F401
    except ImportError:
        raise ValueError("joint solver cpsat needs OR-Tools: pip install ortools (see gpu_joint_cpsat)") from None
    return CpSatJoint(joint.base, joint.frag, joint.window, joint.orders, joint.keep_placed, joint.sweeps,
                      k=int(k), seconds=float(seconds))
