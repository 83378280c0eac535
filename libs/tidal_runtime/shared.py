"""One object for every equal value a service keeps many of.

A cluster's pods repeat themselves: the replicas of a workload ask the
same, hold the same on their node and run the same way, and a service
keeping 150,000 running pods keeps each of those parts once rather than
once a pod. The table is bounded: past `limit` distinct values it starts
afresh (a hostile variety costs at most that), and the objects shared
before stay valid, only no longer shared with the new ones.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class SharedValues:
    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._kept: dict[Hashable, Any] = {}

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The object kept for `key`; `make()` kept for it when there is none."""
        found = self._kept.get(key)
        if found is None:
            if len(self._kept) >= self.limit:
                self._kept.clear()
            found = self._kept[key] = make()
        return found

    def same(self, value: T) -> T:
        """The kept object equal to `value` (`value` itself, kept, the first time)."""
        found = self._kept.get(value)
        if found is None:
            found = self.get(value, lambda: value)
        return found

    def __len__(self) -> int:
        return len(self._kept)
