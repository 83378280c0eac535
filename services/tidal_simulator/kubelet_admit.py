"""What the kubelet's admission predicate checks of a pod bound to its node
(pure): the pod's requests against the node object's `status.allocatable`
less the requests of the pods the kubelet already runs — as the kubelet's
`lifecycle.PredicateAdmitHandler` runs the scheduler's resource fit.

- A pod's request of a resource is the larger of Σ its containers' requests
  and each init container's (a limit without a request is the request, as
  the API server defaults it). CPU is counted in milli-CPU, memory in
  bytes, any other resource in units.
- The pod count is checked first (`pods`), then CPU, memory and every other
  resource by name; a resource the pod asks none of is not checked.
- An extended resource the node's allocatable does not list at all is not
  checked (the kubelet drops it, for cluster-level resources); one listed,
  even at 0, is.
- The first shortfall is the refusal: reason `OutOf<resource>` and the
  kubelet's message, "Pod was rejected: Node didn't have enough resource:
  cpu, requested: 2000, used: 7000, capacity: 8000" (capacity being the
  allocatable figure).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

STANDARD = ("cpu", "memory")
_SUFFIXES = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
             "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
             "P": Decimal("1e15"), "E": Decimal("1e18"), "Ki": Decimal(2 ** 10), "Mi": Decimal(2 ** 20),
             "Gi": Decimal(2 ** 30), "Ti": Decimal(2 ** 40), "Pi": Decimal(2 ** 50), "Ei": Decimal(2 ** 60)}


def quantity(text: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "4Gi", "1e3", 2) as a number; ValueError when it is none."""
    value = str(text).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and value.endswith(suffix):
            number, scale = value[:-len(suffix)], _SUFFIXES[suffix]
            break
    else:
        number, scale = value, Decimal(1)
    try:
        return Decimal(number) * scale
    except InvalidOperation:
        raise ValueError(f"quantity {text!r} is not valid") from None


def amount(resource: str, text: Any) -> int:
    """`text` of `resource` in the kubelet's unit: milli-CPU for cpu, else units (rounded up)."""
    scaled = quantity(text) * (1000 if resource == "cpu" else 1)
    return int(scaled.to_integral_value(rounding=ROUND_CEILING))


def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: amount(name, value) for name, value in asked.items()}


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What `pod` (a Pod object) requests, by resource (see the module docstring)."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, value in container_requests(container).items():
            total[name] = total.get(name, 0) + value
    for container in spec.get("initContainers") or []:
        for name, value in container_requests(container).items():
            total[name] = max(total.get(name, 0), value)
    return total


def allocatable_of(node: Mapping[str, Any]) -> dict[str, int]:
    """The node object's `status.allocatable`, in the kubelet's units (unreadable figures left out)."""
    found: dict[str, int] = {}
    for name, value in ((node.get("status") or {}).get("allocatable") or {}).items():
        try:
            found[name] = amount(name, value)
        except ValueError:
            continue
    return found


@dataclass(frozen=True)
class Refusal:
    """Why the kubelet rejects a pod: kube's reason and the pod's status message."""

    reason: str
    message: str


def fits(asked: Mapping[str, int], allocatable: Mapping[str, int],
         running: Iterable[Mapping[str, int]]) -> Refusal | None:
    """None when a pod asking `asked` fits `allocatable` less the `running`
    pods' requests, else the kubelet's refusal (see the module docstring)."""
    running = list(running)
    used: dict[str, int] = {"pods": len(running)}
    for pod in running:
        for name, value in pod.items():
            used[name] = used.get(name, 0) + value
    wanted = {"pods": 1, **{k: v for k, v in asked.items() if v > 0}}
    extended = sorted(k for k in wanted if k not in ("pods", *STANDARD))
    for name in ("pods", *STANDARD, *extended):
        if name not in wanted or (name in extended and name not in allocatable):
            continue
        need, have, limit = wanted[name], used.get(name, 0), allocatable.get(name, 0)
        if need > limit - have:
            return Refusal(f"OutOf{name}", "Pod was rejected: Node didn't have enough resource: "
                                           f"{name}, requested: {need}, used: {have}, capacity: {limit}")
    return None


def unexpected(error: str) -> Refusal:
    """The device manager's refusal: an Allocate (or device choice) that failed."""
    return Refusal("UnexpectedAdmissionError", f"Pod was rejected: Allocate failed due to {error}, which is unexpected")
