"""A pending pod explained on the pod, as kube-scheduler does it: for each
`pending` decision, the `PodScheduled=False` condition (reason
`Unschedulable`, the message of `unschedulable.decision_message`) on
pods/status, and a `FailedScheduling` Warning event.

- The condition is patched when its message changes (a repeat of the same
  message writes nothing). The binding itself turns it to `PodScheduled=True`:
  the API server does that on every binding, as it does for kube-scheduler.
- Events are deduplicated and rate-limited the way client-go's recorder
  does it: one Event object per (pod, reason, message), named as client-go
  names it (`<pod>.<unix nanoseconds, hex>`), whose `count` grows and
  `lastTimestamp` moves on a repeat (a PATCH, not a new event), and a token
  bucket per pod (`event_budget.EventBudget`) over them all. Which object
  counts which message is remembered here (an LRU, as client-go's
  correlator): a restarted bridge starts new objects, as a restarted
  kube-scheduler does, and needs no right to read events.
- Neither delays a binding: the decision stream hands each pending decision
  to `submit`, and `run` writes them in the background, the latest per pod
  (a pod whose reason changed three times while others were written gets
  one write, as kube-scheduler's condition says only the latest). Placement
  retries every waiting pod when room appears: thousands of pending
  decisions at once must not hold the next binding back.
- Both are best effort: an API failure is logged and the decision stream
  goes on (placement publishes the pod's decision again when it tries it
  again, see tidal_placement.cycle); a pod gone (404) is forgotten.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from datetime import datetime

from tidal_clock import Clock, now_utc, wall_clock, wall_clock_ns
from tidal_schemas import PlacementDecision

from .errors import BridgeError, KubeStatusError
from .event_budget import EventBudget
from .kube import Kube
from .objects import pod_event
from .unschedulable import FAILED_SCHEDULING, decision_message, scheduled_condition, stamp, status_patch

log = logging.getLogger(__name__)
COUNTS_KEPT = 4096  # events remembered (client-go's LRU size); a message forgotten starts a new object


class PodStatusReporter:
    def __init__(self, kube: Kube, *, gpu_resource: str = "nvidia.com/gpu", budget: EventBudget | None = None,
                 clock: Clock = wall_clock) -> None:
        self.kube = kube
        self.gpu_resource = gpu_resource
        self.budget = budget or EventBudget()
        self.clock = clock
        self._messages: dict[str, str] = {}  # pod key -> message of the condition last patched
        self._counts: OrderedDict[tuple[str, str], tuple[str, int]] = OrderedDict()  # (pod, message) -> (event, count)
        self._counted: dict[str, set[str]] = {}  # pod -> its messages in _counts: forget finds them without a scan
        self._bound: OrderedDict[str, None] = OrderedDict()  # pods bound here lately: a late pending decision
        # pod key -> (latest pending decision not yet written, the GPU resource the pod asks)
        self._queued: dict[str, tuple[PlacementDecision, str | None]] = {}
        self._wake = asyncio.Event()

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
        self._queued.pop(key, None)
        self._bound.pop(key, None)
        self.budget.forget(key)
        for message in self._counted.pop(key, ()):  # a pod of the same name counts anew
            self._counts.pop((key, message), None)

    def submit(self, decision: PlacementDecision, gpu_resource: str | None = None) -> None:
        """Queue a `pending` decision for `run` to write (replacing one of
        the same pod not written yet); `gpu_resource`: the one the pod asks,
        named in the message (default: the cluster's)."""
        key = decision.event_key()
        if key not in self._bound:
            self._queued.pop(key, None)  # to the back: pods take turns
            self._queued[key] = (decision, gpu_resource)
            self._wake.set()

    @property
    def backlog(self) -> int:
        """Pending decisions submitted and not yet written."""
        return len(self._queued)

    async def run(self) -> None:
        """Write what `submit` queued, oldest pod first, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queued:
                key = next(iter(self._queued))
                await self.unschedulable(*self._queued.pop(key))

    async def unschedulable(self, decision: PlacementDecision, gpu_resource: str | None = None) -> None:
        """Set the condition and record the event for a `pending` decision."""
        ns, name, key = decision.namespace, decision.name, decision.event_key()
        if key in self._bound:
            return
        message = decision_message(decision, gpu_resource or self.gpu_resource)
        now = now_utc(self.clock).replace(microsecond=0)  # as metav1.Time keeps it
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
            await self._record(decision, message, now)

    async def _record(self, decision: PlacementDecision, message: str, now: datetime) -> None:
        """Count a repeat on the event object of this message, or create one."""
        ns, key = decision.namespace, (decision.event_key(), message)
        ref = {"metadata": {"namespace": ns, "name": decision.name, "uid": decision.uid}}
        known = self._counts.pop(key, None)
        self._uncount(key)
        try:
            if known is not None:
                name, count = known
                try:
                    await self.kube.patch_event(ns, name, {"count": count + 1, "lastTimestamp": stamp(now)})
                    self._remember(key, name, count + 1)
                    return
                except BridgeError as exc:
                    if not (isinstance(exc, KubeStatusError) and exc.code == 404):
                        self._remember(key, name, count)  # counted on the same object next time
                        raise
                    # 404: expired (events live an hour): a new object
            name = f"{decision.name[:200]}.{wall_clock_ns():x}"
            await self.kube.create_event(ns, pod_event(ref, reason=FAILED_SCHEDULING, message=message, now=now,
                                                       name=name))
            self._remember(key, name, 1)
        except BridgeError as exc:
            log.warning("event %s on pod %s not recorded: %s", FAILED_SCHEDULING, decision.event_key(), exc)

    def _remember(self, key: tuple[str, str], name: str, count: int) -> None:
        self._counts[key] = (name, count)
        self._counted.setdefault(key[0], set()).add(key[1])
        while len(self._counts) > COUNTS_KEPT:
            self._uncount(self._counts.popitem(last=False)[0])

    def _uncount(self, key: tuple[str, str]) -> None:
        pod, message = key
        messages = self._counted.get(pod)
        if messages is not None:
            messages.discard(message)
            if not messages:
                del self._counted[pod]


async def create_pod_event(kube: Kube, pod: dict, reason: str, message: str, kind: str = "Warning", *,
                           log: logging.Logger = log, clock: Clock = wall_clock, count: int = 1) -> bool:
    """Create a Kubernetes Event on the pod (seen `count` times), at `clock`'s time; True when it exists now."""
    body = pod_event(pod, reason=reason, message=message, kind=kind, now=now_utc(clock), count=count)
    try:
        await kube.create_event(body["metadata"]["namespace"], body)
    except KubeStatusError as exc:
        if exc.code == 409:  # reported already (another replica, an earlier run)
            return True
        log.warning("could not create event %s on pod %s: %s", reason, body["involvedObject"]["name"], exc)
        return False
    except BridgeError as exc:
        log.warning("could not create event %s: %s", reason, exc)
        return False
    return True
