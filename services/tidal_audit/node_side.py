"""Two invariants of what reached the node (docs/last-mile.md), checked over
what the kubelets did beside the decision log (pure). The streams do not
hold what a kubelet did: a simulated run hands its kubelet stand-ins'
records in (`ContainerDevices`, `AdmissionFailure`).

- `devices-not-decided`: the devices a pod's containers were handed by the
  device plugin (the GPUs of `Allocate`'s response, with their milli) are
  those of the decision that placed it — the last decision that counts (`tidal_schemas.fence`)
  placing that pod (by uid) on that node whose bind succeeded. A pod
  admitted with no devices (a record with no GPUs) is checked too: its
  decision must give none.
- `failed-admission`: no pod placed by Tidal (such a decision, bound) is
  rejected by its kubelet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidal_schemas import BindResult, Envelope, PlacementDecision, PlacementDecisions
from tidal_schemas.fence import DecisionFence

from .violation import Violation, cite

DEVICES = "devices-not-decided"
ADMISSION = "failed-admission"
NAMES = (DEVICES, ADMISSION)


@dataclass(frozen=True)
class ContainerDevices:
    """What one container of a pod was handed: (GPU id, milli) as its
    response names them (a pod admitted without devices: one record, no GPUs)."""

    pod: str
    uid: str
    node: str
    container: str
    gpus: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class AdmissionFailure:
    pod: str
    uid: str
    node: str
    reason: str
    message: str


def placements(events: Iterable[Envelope[Any]], cluster: str | None = None
               ) -> dict[tuple[str, str], tuple[PlacementDecision, Envelope[Any]]]:
    """(pod key, node) → the last counting decision placing the pod there whose bind succeeded."""
    fence, placed, bound = DecisionFence(), {}, {}
    for envelope in events:
        if cluster is not None and envelope.cluster != cluster:
            continue
        p = envelope.payload
        if isinstance(p, PlacementDecisions):
            for d in p.items:
                if fence.admit(d) and d.outcome == "placed":
                    placed[d.decision_id] = (d, envelope)
        elif isinstance(p, BindResult) and p.ok and p.decision_id in placed:
            d, where = placed[p.decision_id]
            bound[(d.event_key(), d.node or "")] = (d, where)
    return bound


def _of(decided: Mapping[tuple[str, str], tuple[PlacementDecision, Envelope[Any]]], pod: str, uid: str, node: str):
    found = decided.get((pod, node))
    if found is not None and found[0].uid and uid and found[0].uid != uid:
        return None
    return found


def at_the_node(events: Sequence[Envelope[Any]], handed: Iterable[ContainerDevices],
                failures: Iterable[AdmissionFailure], cluster: str | None = None) -> list[Violation]:
    """The violations of both invariants (see the module docstring)."""
    decided = placements(events, cluster)
    found: list[Violation] = []
    pods: dict[tuple[str, str, str], list[ContainerDevices]] = {}
    for container in handed:
        pods.setdefault((container.pod, container.uid, container.node), []).append(container)
    for (pod, uid, node), containers in sorted(pods.items()):
        got: Counter = Counter()
        for c in containers:
            for gpu, milli in c.gpus:
                got[gpu] += milli
        placed = _of(decided, pod, uid, node)
        if placed is None and not got:
            continue  # no devices, and not placed by Tidal: nothing to hold it to
        if placed is None:
            found.append(Violation(DEVICES, f"pod {pod} on {node} was handed GPUs {_show(got)} and no bound decision "
                                            "placed it there"))
            continue
        decision, where = placed
        wanted = Counter()
        for share in decision.gpus:
            wanted[share.gpu] += share.milli
        if got != wanted:
            found.append(Violation(DEVICES, f"pod {pod} on {node}: its containers were handed GPUs {_show(got)}, "
                                            f"its decision gives {_show(wanted)}",
                                   (cite(where, f"placed {decision.decision_id}"),)))
    for failure in failures:
        placed = _of(decided, failure.pod, failure.uid, failure.node)
        if placed is not None:
            decision, where = placed
            found.append(Violation(ADMISSION, f"pod {failure.pod} placed on {failure.node} by Tidal failed kubelet "
                                              f"admission: {failure.reason}: {failure.message}",
                                   (cite(where, f"placed {decision.decision_id}"),)))
    return found


def _show(gpus: Mapping[str, int]) -> str:
    return "{" + ", ".join(f"{g}: {m}" for g, m in sorted(gpus.items())) + "}" if gpus else "none"
