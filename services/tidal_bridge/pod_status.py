"""A pending pod explained on the pod, as kube-scheduler does it: for each
`pending` decision, the `PodScheduled=False` condition (reason
`Unschedulable`, the message of `unschedulable.decision_message`) on
pods/status, and a `FailedScheduling` Warning event.

- The condition is patched when its message changes (a repeat of the same
  message writes nothing). The binding itself turns it to `PodScheduled=True`:
  the API server does that on every binding, as it does for kube-scheduler.
- Events are deduplicated and rate-limited the way client-go's recorder
  does it: one Event object per (pod, reason, message) — its name derived
  from them (`objects.pod_event`) — whose `count` grows and
  `lastTimestamp` moves on a repeat (a PATCH, not a new event), and a token
  bucket per pod (`event_budget.EventBudget`) over them all.
- Both are best effort: an API failure is logged and the decision stream
  goes on (placement publishes the pod's decision again when it tries it
  again, see tidal_placement.cycle); a pod gone (404) is forgotten.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from tidal_schemas import PlacementDecision

from .errors import BridgeError, KubeStatusError
from .event_budget import EventBudget
from .kube import Kube
from .objects import pod_event
from .unschedulable import FAILED_SCHEDULING, decision_message, scheduled_condition, status_patch

log = logging.getLogger(__name__)
COUNTS_KEPT = 4096  # event counts remembered (client-go's LRU size); one forgotten is read back on 409


class PodStatusReporter:
    def __init__(self, kube: Kube, *, gpu_resource: str = "nvidia.com/gpu", budget: EventBudget | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.gpu_resource = gpu_resource
        self.budget = budget or EventBudget()
        self.clock = clock
        self._messages: dict[str, str] = {}  # pod key -> message of the condition last patched
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()  # (namespace, event name) -> count
        self._bound: OrderedDict[str, None] = OrderedDict()  # pods bound here lately: a late pending decision

    def bound(self, namespace: str, name: str) -> None:
        """The pod was bound: it is no longer unschedulable, whatever a
        decision read after the binding says."""
        self.forget(namespace, name)
        key = f"{namespace}/{name}"
        self._bound[key] = None
        while len(self._bound) > COUNTS_KEPT:
            self._bound.popitem(last=False)

    def forget(self, namespace: str, name: str) -> None:
        """The pod was deleted (or bound): its next pending spell starts anew."""
        key = f"{namespace}/{name}"
        self._messages.pop(key, None)
        self._bound.pop(key, None)
        self.budget.forget(key)

    async def unschedulable(self, decision: PlacementDecision) -> None:
        """Set the condition and record the event for a `pending` decision."""
        ns, name, key = decision.namespace, decision.name, decision.event_key()
        if key in self._bound:
            return
        message = decision_message(decision, self.gpu_resource)
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        if self._messages.get(key) != message:
            first = key not in self._messages
            try:
                await self.kube.patch_pod_status(ns, name, status_patch(scheduled_condition(message,
                                                                                            now if first else None)))
            except KubeStatusError as exc:
                if exc.code == 404:
                    self.forget(ns, name)
                    return
                log.warning("condition of pod %s not written: %s", key, exc)
            except BridgeError as exc:
                log.warning("condition of pod %s not written: %s", key, exc)
            else:
                self._messages[key] = message
        if self.budget.allow(key, self.clock()):
            ref = {"metadata": {"namespace": ns, "name": name, "uid": decision.uid}}
            await self._record(pod_event(ref, reason=FAILED_SCHEDULING, message=message, now=now))

    async def _record(self, event: dict[str, Any]) -> None:
        """Create the event, or count a repeat on the one already there."""
        ns, name = event["metadata"]["namespace"], event["metadata"]["name"]
        try:
            count = self._counts.get((ns, name))
            if count is None:
                try:
                    await self.kube.create_event(ns, event)
                    self._remember(ns, name, 1)
                    return
                except KubeStatusError as exc:
                    if exc.code != 409:
                        raise
                    count = int((await self.kube.get_event(ns, name)).get("count") or 1)
            patch = {"count": count + 1, "lastTimestamp": event["lastTimestamp"]}
            try:
                await self.kube.patch_event(ns, name, patch)
            except KubeStatusError as exc:
                if exc.code != 404:
                    raise
                await self.kube.create_event(ns, event)  # expired meanwhile (events live an hour): anew
                count = 0
            self._remember(ns, name, count + 1)
        except BridgeError as exc:
            log.warning("event %s on pod %s not recorded: %s", FAILED_SCHEDULING,
                        event["involvedObject"]["name"], exc)

    def _remember(self, ns: str, name: str, count: int) -> None:
        self._counts.pop((ns, name), None)
        self._counts[(ns, name)] = count
        while len(self._counts) > COUNTS_KEPT:
            self._counts.popitem(last=False)
