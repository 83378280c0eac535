"""What a scenario expects to happen, and the check of a run against it (pure).

Expectations read the run's timeline: one `Happening` per thing that
happened, in the order the simulator saw it, with the scenario time.

- `tainted` / `not-tainted` NODE: the node was (never) tainted;
- `placed` POD [node]: the pod ran (on that node); `pending` POD: it never ran;
- `evicted`, `frozen`, `thawed`, `moved` POD (and `not-…`): an action of
  that kind was carried out on the pod;
- `frozen-before` / `evicted-before` POD then OTHER: the pod's first such
  action came before OTHER's — OTHER may never have had one;
- `actions` KIND [min] [max]: the number of carried-out actions of a kind.

`by_s` (where given) is a deadline in scenario seconds. Pods are named
`namespace/name`, or by name alone when that is unique.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

ActionKind = Literal["taint", "untaint", "evict", "freeze", "thaw", "set-cpuset"]


@dataclass(frozen=True)
class Happening:
    """One thing that happened: `kind` is an action kind (done), `placed`,
    `pending`, `refused` (a kubelet refused a binding), `bind-failed` or `deleted`."""

    t_s: float
    kind: str
    node: str | None = None
    pod: str | None = None
    detail: str = ""
    source: str = ""


class _Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    by_s: float | None = Field(None, ge=0, description="deadline, scenario seconds")


class NodeExpectation(_Expectation):
    kind: Literal["tainted", "not-tainted"]
    node: str


class PodExpectation(_Expectation):
    kind: Literal["placed", "pending", "evicted", "not-evicted", "frozen", "not-frozen", "thawed", "moved"]
    pod: str
    node: str | None = None


class OrderExpectation(_Expectation):
    kind: Literal["frozen-before", "evicted-before"]
    pod: str
    then: str


class CountExpectation(_Expectation):
    kind: Literal["actions"]
    action: ActionKind
    min: int = Field(0, ge=0)
    max: int | None = Field(None, ge=0)


Expectation = Annotated[NodeExpectation | PodExpectation | OrderExpectation | CountExpectation,
                        Field(discriminator="kind")]

_POD_KIND = {"evicted": "evict", "frozen": "freeze", "thawed": "thaw", "moved": "set-cpuset"}


@dataclass(frozen=True)
class Verdict:
    """One expectation, in words, whether it held, and what was seen."""

    expectation: str
    ok: bool
    seen: str


def describe(e: NodeExpectation | PodExpectation | OrderExpectation | CountExpectation) -> str:
    """The expectation in words, e.g. `node n1 gets tainted by 300 s`."""
    by = f" by {e.by_s:g} s" if e.by_s is not None else ""
    if isinstance(e, NodeExpectation):
        return f"node {e.node} {'gets' if e.kind == 'tainted' else 'never gets'} tainted{by}"
    if isinstance(e, OrderExpectation):
        return f"pod {e.pod} is {e.kind.split('-')[0]} before pod {e.then}{by}"
    if isinstance(e, CountExpectation):
        bounds = f"≥ {e.min}" + (f" and ≤ {e.max}" if e.max is not None else "")
        return f"{bounds} {e.action} actions{by}"
    where = f" on {e.node}" if e.node else ""
    if e.kind.startswith("not-"):
        return f"pod {e.pod} is never {e.kind[4:]}{by}"
    return f"pod {e.pod} is {e.kind}{where}{by}"


def resolve_pod(name: str, known: Sequence[str]) -> str:
    """`namespace/name` as given, or the one known pod called `name`."""
    if "/" in name:
        return name
    matches = [k for k in known if k.split("/", 1)[1] == name]
    return matches[0] if len(matches) == 1 else name


def check(expectations: Sequence, timeline: Sequence[Happening], pods: Sequence[str]) -> list[Verdict]:
    """Each expectation against the timeline (see the module docstring)."""
    return [_check(e, timeline, pods) for e in expectations]


def _first(timeline: Sequence[Happening], kind: str, pod: str | None = None, node: str | None = None,
           by_s: float | None = None) -> tuple[int, Happening] | None:
    for i, h in enumerate(timeline):
        if h.kind == kind and (pod is None or h.pod == pod) and (node is None or h.node == node) \
                and (by_s is None or h.t_s <= by_s):
            return i, h
    return None


def _seen(found: tuple[int, Happening] | None) -> str:
    if found is None:
        return "never happened"
    h = found[1]
    return f"at {h.t_s:g} s" + (f" on {h.node}" if h.node else "") + (f" ({h.detail})" if h.detail else "")


def _check(e, timeline: Sequence[Happening], pods: Sequence[str]) -> Verdict:
    text = describe(e)
    if isinstance(e, NodeExpectation):
        found = _first(timeline, "taint", node=e.node, by_s=e.by_s)
        return Verdict(text, (found is not None) == (e.kind == "tainted"), _seen(found))
    if isinstance(e, CountExpectation):
        n = sum(1 for h in timeline if h.kind == e.action and (e.by_s is None or h.t_s <= e.by_s))
        return Verdict(text, n >= e.min and (e.max is None or n <= e.max), f"{n} carried out")
    pod = resolve_pod(e.pod, pods)
    if isinstance(e, OrderExpectation):
        kind = _POD_KIND[e.kind.split("-")[0]]
        first = _first(timeline, kind, pod=pod, by_s=e.by_s)
        then = _first(timeline, kind, pod=resolve_pod(e.then, pods))
        ok = first is not None and (then is None or first[0] < then[0])
        return Verdict(text, ok, f"{pod}: {_seen(first)}; {e.then}: {_seen(then)}")
    if e.kind in ("placed", "pending"):
        found = _first(timeline, "placed", pod=pod, node=e.node, by_s=e.by_s)
        return Verdict(text, (found is not None) == (e.kind == "placed"), _seen(found))
    negative = e.kind.startswith("not-")
    found = _first(timeline, _POD_KIND[e.kind.removeprefix("not-")], pod=pod, by_s=e.by_s)
    return Verdict(text, (found is None) == negative, _seen(found))
