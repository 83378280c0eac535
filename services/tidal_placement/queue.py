"""The scheduling queue (§C): a sort queue ordered by the owner's fair-share
score for the pod's resource type, and a waiting queue per resource type.

- Sort order: score (lower first), then creation time, then name.
- A pod that fits nowhere waits (with its reasons) in the waiting queue of
  its resource type; while it waits, a pod of the same type with a worse
  (higher) score is held back (PreFilter), so lower-priority pods cannot
  take the room a higher-priority one is waiting for. Pods of other types
  are never held back by it.
- Permit timeout: a pod waiting longer than the timeout goes back to the sort
  queue and stops holding others back; it is retried with them.
- Only a pod blocked for room waits. A pod refused by a rule (quota,
  permission, an invalid pod) keeps its reason in the sort queue
  (`refused`): it holds no one back, and it is tried again when room or the
  tenant's configuration may have changed, or when the pod itself does.
- Waiting and refused pods are tried again when room may have appeared
  (`room_appeared`), each no sooner than its back-off allows: 1 s after its
  first attempt, doubling to 10 s (kube-scheduler's pod back-off). Room
  appears with nearly every event in a busy cluster; without the back-off
  each event would cost one attempt per waiting pod.
- Nothing is ever dropped: a pod leaves the queue only when it is placed or
  deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tidal_schemas import resource_type

from .kept import KeptPod, PodLike


NONE_FILTERED: Mapping[str, int] = MappingProxyType({})  # one for every entry not tried yet (a dict each: 64 bytes)


@dataclass(slots=True)  # one per pending pod: 20,000 in a burst
class Entry:
    pod: KeptPod
    score: float = 0.0
    waiting_since: float | None = None  # monotonic seconds; None = in the sort queue
    reason: str = ""
    refused: bool = False  # by a rule, not for room: see `refuse`
    attempts: int = 0
    filtered: Mapping[str, int] = field(default_factory=lambda: NONE_FILTERED)
    announced: float | None = None  # when its last pending decision was published (see cycle.py)
    said: tuple = ()  # the gist of the reason that decision gave (cycle.gist)
    room: bool = False  # room may have appeared since its last attempt
    next_try: float = 0.0  # monotonic seconds: its back-off ends

    @property
    def key(self) -> str:
        return self.pod.event_key()

    @property
    def order(self) -> tuple[float, float, str]:
        return (self.score, self.pod.created, self.key)


class SchedulingQueue:
    def __init__(self, permit_timeout_s: float = 30.0, backoff_s: float = 1.0, max_backoff_s: float = 10.0) -> None:
        self.permit_timeout_s = permit_timeout_s
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.entries: dict[str, Entry] = {}

    def add(self, pod: PodLike, score: float) -> None:
        """Queue a pending pod (a newer event of a queued pod replaces it)."""
        pod = KeptPod.of(pod)
        entry = self.entries.get(pod.event_key())
        if entry is None:
            self.entries[pod.event_key()] = Entry(pod, score)
        else:  # a changed pod (a fixed annotation…) may no longer be refused: try it again
            if entry.pod != pod:
                entry.next_try = 0.0
            entry.pod, entry.score, entry.refused = pod, score, False

    def remove(self, key: str) -> Entry | None:
        return self.entries.pop(key, None)

    def rescore(self, scores: dict[str, float]) -> None:
        for key, score in scores.items():
            if key in self.entries:
                self.entries[key].score = score

    def expire_waits(self, now: float) -> list[str]:
        """Waiting pods past the permit timeout go back to the sort queue."""
        expired = [e.key for e in self.entries.values()
                   if e.waiting_since is not None and now - e.waiting_since >= self.permit_timeout_s]
        for key in expired:
            self.entries[key].waiting_since = None
        return expired

    def room_appeared(self) -> None:
        """Room may have appeared: every waiting or refused pod may try again
        once its back-off ends."""
        for entry in self.entries.values():
            entry.room = True

    def due(self, entry: Entry, now: float) -> bool:
        """Whether the pod is tried in a cycle at `now`: a new (or changed,
        or permit-expired) pod, or a waiting or refused one when room
        appeared since its last attempt, once its back-off is over (a new
        pod has none)."""
        return (self._in_sort_queue(entry) or entry.room) and now >= entry.next_try

    def next_due(self) -> float | None:
        """When the first pod held only by its back-off may be tried."""
        return min((e.next_try for e in self.entries.values() if e.room or self._in_sort_queue(e)), default=None)

    @staticmethod
    def _in_sort_queue(entry: Entry) -> bool:
        # new, changed, or back from the waiting queue (permit expired): tried in
        # turn, but a pod tried before still after its back-off (next_try)
        return entry.waiting_since is None and not entry.refused

    def cycle(self) -> list[tuple[Entry, str | None]]:
        """One pass in priority order: each entry with None (try to place it)
        or the reason it is held back by a better pod of its type waiting."""
        waiting_best = self._waiting_best()
        return [(entry, self._held_back(entry, waiting_best))
                for entry in sorted(self.entries.values(), key=lambda e: e.order)]

    def held_back(self, key: str) -> bool:
        """Whether the queued pod `key` is held back behind a better waiting
        pod of its type (it gets no decision until that one goes)."""
        entry = self.entries.get(key)
        return entry is not None and self._held_back(entry, self._waiting_best()) is not None

    def _waiting_best(self) -> dict[str, tuple]:
        """The best order among waiting pods, per resource type."""
        best: dict[str, tuple] = {}
        for e in self.entries.values():
            if e.waiting_since is not None:
                kind = resource_type(e.pod)
                best[kind] = min(best.get(kind, e.order), e.order)
        return best

    @staticmethod
    def _held_back(entry: Entry, waiting_best: dict[str, tuple]) -> str | None:
        kind = resource_type(entry.pod)
        best = waiting_best.get(kind)
        return f"waiting behind a higher-priority {kind} pod" if best is not None and best < entry.order else None

    def wait(self, key: str, reason: str, filtered: dict[str, int], now: float) -> None:
        """The pod fits nowhere for want of room: it waits, holding back
        worse pods of its type."""
        entry = self.entries[key]
        entry.reason, entry.filtered, entry.refused = reason, filtered, False
        self._tried(entry, now)
        if entry.waiting_since is None:
            entry.waiting_since = now

    def refuse(self, key: str, reason: str, filtered: dict[str, int], now: float) -> None:
        """The pod is refused by a rule (quota, permission, invalid): it stays
        in the sort queue with its reason and holds no one back."""
        entry = self.entries[key]
        entry.reason, entry.filtered, entry.refused = reason, filtered, True
        self._tried(entry, now)
        entry.waiting_since = None

    def _tried(self, entry: Entry, now: float) -> None:
        entry.attempts += 1
        entry.room = False
        # the exponent is capped: 2.0 ** 1024 overflows, and a pod may wait through thousands of tries
        entry.next_try = now + min(self.backoff_s * 2.0 ** min(entry.attempts - 1, 64), self.max_backoff_s)

    def position(self, key: str) -> int | None:
        ordered = sorted(self.entries.values(), key=lambda e: e.order)
        return next((i for i, e in enumerate(ordered) if e.key == key), None)
