"""Carry out a placement decision (SPEC §A step 5): persist it on the pod
and bind, in one write — the Binding carries the decision's annotations,
and the API server sets the node and merges them in one update — so a
failed bind leaves nothing persisted to remove, and placement returns the
assumed resources (it does on a failed `BindResult`).

    1. read the pod: gone → fail; replaced (uid differs), terminating,
       finished, not Tidal's, or bound elsewhere → fail; already bound here
       by this very decision → ok (a redelivered decision);
    2. read the node: gone or cordoned → fail;
    3. create the Binding, with the decision's annotations (decision id,
       NUMA CPUs, GPUs) and the pod's uid as precondition. The API server
       refuses (409) a pod bound, being deleted or replaced meanwhile: then
       re-read the pod: bound here by this decision → ok, bound elsewhere,
       gone, replaced or terminating → fail, else retry after
       bind_retry_s · 2^(n−1), up to `attempts` tries.

Steps 1 and 2 read the bridge's watch caches (`pods`, `nodes`: kept by its
reflectors, as kube-scheduler reads its informers') and ask the API server
only for what they do not hold. A stale pod is harmless: the Binding is
checked against the pod as it is. A node cordoned or deleted a moment
before is seen as late as the watch sees it, as by kube-scheduler. A bind
is one request; its `Scheduled` Event is written behind it (event_recorder.py).

Expected refusals are `BindOutcome` values; a transient API failure (5xx,
429, broken connection) raises, and the service retries the decision.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tidal_bus import RetryPolicy
from tidal_schemas import PlacementDecision
from tidal_schemas.decision_codec import DECISION_ID, write_decision

from .errors import BridgeError, KubeStatusError, unavailable, worth_retrying
from .kube import Kube
from .objects import binding_body

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BindOutcome:
    """Whether the pod is now bound as decided, and why not."""

    ok: bool
    reason: str = ""
    pod: dict[str, Any] | None = None  # the pod as last read (for events)
    bound_to: str | None = None  # refused: the node the pod is bound to already
    unavailable: bool = False  # not refused: the API server kept failing (`bind_retrying` gave up)

    @property
    def result(self) -> str:
        """bound, refused (the pod, its node or the API server said no) or unavailable."""
        return "bound" if self.ok else "unavailable" if self.unavailable else "refused"


def check_pod(pod: dict[str, Any], decision: PlacementDecision, scheduler_name: str) -> BindOutcome | None:
    """Why `pod` cannot be bound by `decision` (a failed outcome), that it
    already is (an ok outcome), or None when binding may go ahead."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    key = f"{decision.namespace}/{decision.name}"
    if decision.uid and meta.get("uid") and meta["uid"] != decision.uid:
        return BindOutcome(False, f"pod {key} was replaced: uid is {meta['uid']}, the decision was for {decision.uid}")
    node = spec.get("nodeName")
    if node:
        if node == decision.node and (meta.get("annotations") or {}).get(DECISION_ID) == decision.decision_id:
            return BindOutcome(True, "already bound by this decision", pod)
        return BindOutcome(False, f"pod {key} is already bound to node {node}", bound_to=node)
    if meta.get("deletionTimestamp"):
        return BindOutcome(False, f"pod {key} is terminating")
    if status.get("phase") in ("Succeeded", "Failed"):
        return BindOutcome(False, f"pod {key} has finished ({status['phase']})")
    if spec.get("schedulerName") != scheduler_name:
        return BindOutcome(False, f"pod {key} has schedulerName {spec.get('schedulerName')!r}, not {scheduler_name!r}")
    return None


class Cached(Protocol):
    """Objects as a watch last saw them (`watch.Reflector`)."""

    def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class Binder:
    """Binds pods as decided, against one API server, reading `pods` and
    `nodes` (watch caches) where they hold the object."""

    def __init__(self, kube: Kube, *, scheduler_name: str = "tidal", attempts: int = 3, retry_s: float = 0.2,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, pods: Cached | None = None,
                 nodes: Cached | None = None) -> None:
        self.kube = kube
        self.pods, self.nodes = pods, nodes
        self.scheduler_name = scheduler_name
        self.attempts = attempts
        self.retry_s = retry_s
        self.sleep = sleep

    async def bind(self, decision: PlacementDecision) -> BindOutcome:
        """Steps 1–3 of the module docstring for a `placed` decision."""
        ns, name, node = decision.namespace, decision.name, decision.node or ""
        pod = (self.pods and self.pods.get(ns, name)) or await self._pod(ns, name)
        if pod is None:
            return BindOutcome(False, f"pod {ns}/{name} is gone")
        verdict = check_pod(pod, decision, self.scheduler_name)
        if verdict is not None:
            return verdict
        node_problem = await self._node_problem(node)
        if node_problem:
            return BindOutcome(False, node_problem, pod)
        return await self._bind(decision, pod)

    async def bind_retrying(self, decision: PlacementDecision, retry: RetryPolicy) -> BindOutcome:
        """`bind`, again while the API server fails transiently (up to
        `retry.max_attempts` tries, `retry`'s back-off between them); then a
        failed outcome naming the failure."""
        attempt = 1
        while True:
            try:
                return await self.bind(decision)
            except BridgeError as exc:
                if not worth_retrying(exc, attempt, retry.max_attempts):
                    return BindOutcome(False, unavailable(exc, attempt, retry.max_attempts), unavailable=True)
            await self.sleep(retry.delay(attempt))
            attempt += 1

    async def _pod(self, ns: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.kube.get_pod(ns, name)
        except KubeStatusError as exc:
            if exc.code == 404:
                return None
            raise

    async def _node_problem(self, node: str) -> str:
        try:
            found = (self.nodes and self.nodes.get("", node)) or await self.kube.get_node(node)
        except KubeStatusError as exc:
            if exc.code == 404:
                return f"node {node} is gone"
            raise
        if (found.get("spec") or {}).get("unschedulable"):
            return f"node {node} is cordoned (spec.unschedulable)"
        return ""

    async def _bind(self, decision: PlacementDecision, pod: dict[str, Any]) -> BindOutcome:
        ns, name, node = decision.namespace, decision.name, decision.node or ""
        uid = (pod.get("metadata") or {}).get("uid") or decision.uid
        body = binding_body(ns, name, node, uid, write_decision(decision))
        reason = ""
        for attempt in range(1, self.attempts + 1):
            try:
                await self.kube.bind(ns, name, body)
                return BindOutcome(True, "", pod)
            except KubeStatusError as exc:
                if exc.code == 404:
                    return BindOutcome(False, f"pod {ns}/{name} is gone")
                if exc.code != 409:
                    if exc.retriable:
                        raise
                    return BindOutcome(False, f"binding refused: {exc}", pod)
                reason = f"binding conflict after {attempt} attempt(s): {exc.message or exc.reason}"
            current = await self._pod(ns, name)
            if current is None:
                return BindOutcome(False, f"pod {ns}/{name} is gone")
            pod = current
            verdict = check_pod(pod, decision, self.scheduler_name)
            if verdict is not None:  # bound meanwhile (by us: ok; by someone else: no retry helps)
                return verdict
            if attempt < self.attempts:
                await self.sleep(self.retry_s * 2 ** (attempt - 1))
        log.info("binding %s/%s to %s failed: %s", ns, name, node, reason)
        return BindOutcome(False, reason, pod)
