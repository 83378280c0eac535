"""Which reviews get the oversold figure (pure).

Only an UPDATE of `nodes/status` is patched (a PATCH reaches admission as
an UPDATE: admission operations are CREATE, UPDATE, DELETE and CONNECT).

By default only the node's own kubelet (user `system:node:<node>`) gets
its update patched: only its figure is the kubelet's figure the patch
clamps to and records. An update by anyone else (node-problem-detector
patching a condition, an operator) passes unchanged; it leaves the stored
allocatable as it was, and the kubelet's next status update (every
`nodeStatusUpdateFrequency`, 10 s by default, since the stored figure
differs from its own) is patched again. `kubelet_only=False` patches every
writer's status update, the figure it writes then taken as the node's own.
"""

from __future__ import annotations

from tidal_schemas import Resources

from .patch import StatusPatch, oversold_patch
from .review import Review

NODE_USER = "system:node:"


def answer(review: Review, granted: Resources | None, why_not: str, *, max_factor: float,
           kubelet_only: bool = True) -> StatusPatch:
    """The patch for `review` given the node's granted allocatable (None:
    none usable, `why_not` says why)."""
    if not review.node_status_update:
        return StatusPatch(reason=f"not an update of nodes/status ({review.operation} "
                                  f"{review.resource}/{review.sub_resource}): unchanged")
    if kubelet_only and review.username != NODE_USER + review.name:
        return StatusPatch(reason=f"written by {review.username or 'an unnamed user'}, not the kubelet of "
                                  f"node {review.name}: unchanged")
    if granted is None:
        return StatusPatch(reason=f"{why_not}: unchanged")
    return oversold_patch(review.obj, review.old, granted, max_factor)
