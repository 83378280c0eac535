"""Node actions the bridge carries out: taint, untaint, evict.

- taint / untaint: read the node, add or remove the (key, effect) taint
  keeping every other one, and write the list back only if the node is
  unchanged since the read (resourceVersion precondition; on 409 read again,
  up to `conflict_attempts`). Already as wanted → done, nothing written.
- evict: through the Eviction API, with the pod's uid as precondition, only
  when the pod is still on the action's node. A PodDisruptionBudget that
  forbids it answers 429: the outcome is `refused` with `retry=True`, and
  the service tries again later. Never forced, never a plain delete.

Expected outcomes are `ActionOutcome` values; a transient API failure
raises and the service retries the action.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tidal_bus import HandlerError
from tidal_schemas import NodeAction

from .errors import BridgeError, KubeStatusError, unavailable
from .kube import Kube
from .nodes import with_taint, without_taint
from .objects import eviction_body, taints_patch


@dataclass(frozen=True)
class ActionOutcome:
    """An `ActionResult` status with why; `retry` asks for another try later."""

    status: str
    reason: str = ""
    retry: bool = False


class Actuator:
    """Carries out node actions against one API server."""

    def __init__(self, kube: Kube, *, conflict_attempts: int = 5) -> None:
        self.kube = kube
        self.conflict_attempts = conflict_attempts

    async def taint(self, action: NodeAction) -> ActionOutcome:
        """Add the taint (key, effect) to the node."""
        return await self._retaint(action, add=True)

    async def untaint(self, action: NodeAction) -> ActionOutcome:
        """Remove the taint (key, effect) from the node."""
        return await self._retaint(action, add=False)

    async def _retaint(self, action: NodeAction, *, add: bool) -> ActionOutcome:
        key, effect = action.taint_key or "", action.taint_effect
        for _ in range(self.conflict_attempts):
            node = await self._node(action.node)
            if node is None:
                return ActionOutcome("failed", f"node {action.node} is gone")
            current = (node.get("spec") or {}).get("taints")
            taints = with_taint(current, key, effect) if add else without_taint(current, key, effect)
            if taints is None:
                return ActionOutcome("done", f"taint {key}:{effect} already {'present' if add else 'absent'}")
            version = (node.get("metadata") or {}).get("resourceVersion") or ""
            try:
                await self.kube.patch_node(action.node, taints_patch(taints, version))
                return ActionOutcome("done", f"taint {key}:{effect} {'added' if add else 'removed'}")
            except KubeStatusError as exc:
                if exc.code == 409:
                    continue  # the node changed since we read it: read again
                if exc.code == 404:
                    return ActionOutcome("failed", f"node {action.node} is gone")
                if exc.retriable:
                    raise
                return ActionOutcome("failed", f"patching node {action.node}: {exc}")
        return ActionOutcome("failed", f"node {action.node} kept changing: {self.conflict_attempts} conflicts")

    async def _node(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.kube.get_node(name)
        except KubeStatusError as exc:
            if exc.code == 404:
                return None
            raise

    async def evict(self, action: NodeAction) -> ActionOutcome:
        """Evict `action.pod` ("namespace/name") if it still runs on `action.node`."""
        ns, _, name = (action.pod or "").rpartition("/")
        if not ns or not name:
            return ActionOutcome("failed", f"pod {action.pod!r}: expected namespace/name")
        try:
            pod = await self.kube.get_pod(ns, name)
        except KubeStatusError as exc:
            if exc.code == 404:
                return ActionOutcome("unknown-pod", f"pod {ns}/{name} is gone")
            raise
        on = (pod.get("spec") or {}).get("nodeName")
        if on != action.node:
            return ActionOutcome("unknown-pod", f"pod {ns}/{name} is on node {on or '(none)'}, not {action.node}")
        uid = (pod.get("metadata") or {}).get("uid") or ""
        try:
            await self.kube.evict(ns, name, eviction_body(ns, name, uid))
        except KubeStatusError as exc:
            if exc.code == 429:
                return ActionOutcome("refused", f"eviction refused (disruption budget): {exc.message or exc.reason}",
                                     retry=True)
            if exc.code in (404, 409):  # gone, or replaced by a pod of the same name (uid precondition)
                return ActionOutcome("unknown-pod", f"pod {ns}/{name}: {exc.message or exc.reason}")
            if exc.retriable:
                raise
            return ActionOutcome("failed", f"eviction of {ns}/{name}: {exc}")
        return ActionOutcome("done", f"evicted {ns}/{name}")


async def carry_out(run: Callable[[NodeAction], Awaitable[ActionOutcome]], action: NodeAction, age_s: float,
                    max_age_s: float, attempt: int, limit: int) -> ActionOutcome:
    """What became of `action`: skipped when a dry run or older than
    `max_age_s`, else `run`'s outcome; a retriable failure raises for a
    later delivery while `attempt` < `limit`."""
    if action.dry_run:
        return ActionOutcome("skipped", "dry run: not executed")
    if age_s > max_age_s:
        return ActionOutcome("skipped", f"stale: issued {age_s:.0f}s ago (limit {max_age_s:.0f}s)")
    try:
        outcome = await run(action)
    except BridgeError as exc:
        outcome = ActionOutcome("failed", unavailable(exc, attempt, limit))
    if outcome.retry and attempt < limit:
        raise HandlerError(outcome.reason, retriable=True)
    return outcome
