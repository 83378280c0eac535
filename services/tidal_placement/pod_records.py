"""The record of every pod placement knows, by key, kept in the least room.

Most of a cluster's pods run, and of a running pod nothing is known but its
latest event: `PodRecord.settle` drops what only a pending pod reads. Such
a pod is kept as its `KeptPod` alone, with no `PodRecord` around it (72
bytes less a pod, of the 150,000 a 5,000-node cluster runs); a record is
made again when a decision, a failed bind, the node agent's assignment or a
placement of this replica is to be kept for it.

The key each pod is kept under is one string for every table of placement
(records, holdings, the node's pods, the queue…): `key_of` gives back the
object kept first, so a key read from a later event is dropped, not kept
again.
"""

from __future__ import annotations

from collections.abc import Iterator

from .holdings import PodRecord
from .kept import KeptPod


class PodRecords:
    """pod key -> `PodRecord`, a pod whose record would hold nothing else kept as the pod."""

    def __init__(self) -> None:
        self._known: dict[str, PodRecord | KeptPod] = {}

    def get(self, key: str) -> PodRecord | None:
        """What is known of the pod, to read: a pod kept alone comes in a record
        made for the asking, so change it through `edit`."""
        known = self._known.get(key)
        return PodRecord(known.key, known) if isinstance(known, KeptPod) else known

    def key_of(self, key: str) -> str:
        """The key object the pod is kept under (`key` itself for a pod not known)."""
        known = self._known.get(key)
        return key if known is None else known.key

    def edit(self, key: str) -> PodRecord:
        """The pod's record, to change (made when there is none); `keep` it after."""
        known = self._known.get(key)
        if isinstance(known, KeptPod):
            known = self._known[key] = PodRecord(known.key, known)
        elif known is None:
            known = self._known[key] = PodRecord(key)
        return known

    def keep(self, key: str, record: PodRecord) -> None:
        """Keep the pod alone when its record holds nothing else (a record made
        for the asking by `get` is not kept: its pod is kept alone already)."""
        if self._known.get(key) is record and record.pod is not None and record.holds_only_its_pod():
            self._known[key] = record.pod

    def set_pod(self, key: str, pod: KeptPod) -> None:
        known = self._known.get(key)
        if isinstance(known, PodRecord):
            known.pod = pod
        else:
            self._known[key] = pod

    def pod(self, key: str) -> KeptPod | None:
        return _pod_of(self._known.get(key))

    def pods(self) -> Iterator[tuple[str, KeptPod]]:
        for key, known in self._known.items():
            pod = _pod_of(known)
            if pod is not None:
                yield key, pod

    def records(self) -> Iterator[PodRecord]:
        """The records that hold more than their pod."""
        return (known for known in self._known.values() if isinstance(known, PodRecord))

    def pop(self, key: str) -> None:
        self._known.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self._known

    def __iter__(self) -> Iterator[str]:
        return iter(self._known)

    def __len__(self) -> int:
        return len(self._known)


def _pod_of(known: PodRecord | KeptPod | None) -> KeptPod | None:
    return known.pod if isinstance(known, PodRecord) else known
