"""The JSON patch that writes a node's oversold CPU and memory into the
status a nodes/status update is about to store (pure).

Per resource r (CPU in milli-CPU, memory in bytes):

    own     = the kubelet's figure (see `kubelet_figures`)
    cap     = own × max_factor, rounded down (to the milli-CPU, to the KiB)
    granted = oversell's newest allocatable for the node (`node.allocatable`)
    written = min(granted, cap)   when that is above own
            = own                 otherwise: never below the kubelet's figure

Worked example: the kubelet says 8 CPUs and 32Gi, oversell grants 14000m
and 40960 MiB, max_factor 1.5: cpu = min(14, 12) = 12, memory =
min(40Gi, 48Gi) = 40Gi.

When a resource is oversold the kubelet's figures are kept, as it wrote
them, in the annotation `tidal.dev/kubelet-allocatable` (for operators:
`{"cpu": "8", "memory": "32Gi"}`), and what the webhook wrote in
`tidal.dev/oversold-allocatable`; when neither is, both go.

Where the kubelet's figure is kept, and why an annotation works: the node
status strategy of kube-apiserver (`pkg/registry/core/node/strategy.go`,
`nodeStatusStrategy.PrepareForUpdate`) resets only `spec` (and a
`status.config` not in use) on a nodes/status update, and its reset fields
are `spec` only; `rest.ResetObjectMetaForStatus`, which would put back the
stored labels and annotations, is opt-in and nodes do not call it. A
mutating webhook's change to `metadata.annotations` on a status update is
therefore stored (mutating admission runs before the strategy, so a change
to `spec` would be dropped: the patch touches only status and annotations).

The kubelet's own figure, per resource: the request's figure when it
differs from the stored one (the writer set it); else, when the stored
figure is the one the webhook wrote (`tidal.dev/oversold-allocatable`),
the recorded kubelet figure (the request left our figure in place, e.g. a
kubelet patch of conditions only); else the request's figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from tidal_kube.quantity import MIB, QuantityError, format_binary, format_decimal, parse
from tidal_schemas import Resources

KUBELET_ANNOTATION = "tidal.dev/kubelet-allocatable"
WRITTEN_ANNOTATION = "tidal.dev/oversold-allocatable"
RESOURCES = ("cpu", "memory")


@dataclass(frozen=True)
class StatusPatch:
    """JSON patch operations (none: the update passes unchanged) and why."""

    ops: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    written: dict[str, str] = field(default_factory=dict)  # resource -> the figure the update will store


def _allocatable(obj: dict[str, Any] | None) -> dict[str, Any]:
    found = ((obj or {}).get("status") or {}).get("allocatable")
    return found if isinstance(found, dict) else {}


def _annotation(objects: tuple[dict[str, Any] | None, ...], name: str) -> dict[str, str]:
    """The JSON map in annotation `name` of the first object that has one ({} if unreadable)."""
    for obj in objects:
        text = (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(name)
        if text is None:
            continue
        try:
            found = json.loads(text)
        except (TypeError, ValueError):
            return {}
        return {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, dict) else {}
    return {}


def _same(a: object, b: object) -> bool:
    try:
        return a is not None and b is not None and parse(a) == parse(b)
    except QuantityError:
        return a == b


def kubelet_figures(obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, str]:
    """resource -> the kubelet's own figure, as written (see the module docstring)."""
    new, stored = _allocatable(obj), _allocatable(old)
    recorded = _annotation((obj, old), KUBELET_ANNOTATION)
    written = _annotation((obj, old), WRITTEN_ANNOTATION)
    figures = {}
    for resource in RESOURCES:
        if resource not in new:
            continue
        ours = _same(stored.get(resource), written.get(resource)) and resource in recorded
        unchanged = _same(new[resource], stored.get(resource))
        figures[resource] = recorded[resource] if unchanged and ours else str(new[resource])
    return figures


def _granted(resource: str, granted: Resources) -> Fraction:
    return Fraction(granted.cpu_milli, 1000) if resource == "cpu" else Fraction(granted.memory_mib * MIB)


def _cap(resource: str, own: Fraction, max_factor: float) -> Fraction:
    factor = Fraction(str(max_factor))
    if resource == "cpu":
        return Fraction(math.floor(own * factor * 1000), 1000)
    return Fraction(math.floor(own * factor / 1024) * 1024)


def _pointer(*parts: str) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def oversold_patch(obj: dict[str, Any], old: dict[str, Any] | None, granted: Resources,
                   max_factor: float) -> StatusPatch:
    """The patch writing min(granted, own × max_factor), never below own,
    for CPU and memory into `obj`'s status.allocatable, with the annotations."""
    try:
        own_text = kubelet_figures(obj, old)
        own = {r: parse(t) for r, t in own_text.items()}
    except QuantityError as exc:
        return StatusPatch(reason=f"the kubelet's allocatable is not readable: {exc}")
    if not own:
        return StatusPatch(reason="no CPU or memory in status.allocatable")
    written, notes, oversold = {}, [], False
    for resource, figure in own.items():
        cap = _cap(resource, figure, max_factor)
        wanted = min(_granted(resource, granted), cap)
        if wanted > figure:
            oversold = True
            text = format_decimal(wanted) if resource == "cpu" else format_binary(wanted)
            notes.append(f"{resource} {own_text[resource]} -> {text}" + (" (cap)" if wanted == cap else ""))
        else:
            text = own_text[resource]
            notes.append(f"{resource} {text} (granted not above the kubelet's)")
        written[resource] = text
    ops = [{"op": "replace", "path": _pointer("status", "allocatable", r), "value": text}
           for r, text in written.items() if str(_allocatable(obj).get(r)) != text]
    ops += _annotation_ops(obj, own_text, written, oversold)
    return StatusPatch(ops=ops, reason="; ".join(notes), written=written)


def _annotation_ops(obj: dict[str, Any], own: dict[str, str], written: dict[str, str],
                    oversold: bool) -> list[dict[str, Any]]:
    annotations = (obj.get("metadata") or {}).get("annotations")
    present = annotations if isinstance(annotations, dict) else None
    if not oversold:
        return [{"op": "remove", "path": _pointer("metadata", "annotations", name)}
                for name in (KUBELET_ANNOTATION, WRITTEN_ANNOTATION) if present and name in present]
    wanted = {KUBELET_ANNOTATION: json.dumps(own, sort_keys=True, separators=(",", ":")),
              WRITTEN_ANNOTATION: json.dumps(written, sort_keys=True, separators=(",", ":"))}
    if present is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": wanted}]
    return [{"op": "add", "path": _pointer("metadata", "annotations", name), "value": text}
            for name, text in wanted.items() if present.get(name) != text]
