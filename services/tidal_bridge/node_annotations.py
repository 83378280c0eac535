"""Which allocatable annotations still need writing (pure, with an
injectable clock). Oversell publishes every node's allocatable with every
sample: at 5,000 nodes sampled every 10 s that would be 500 PATCH requests a
second to the API server, nearly all writing what the node already has. A
node's figures are written when they differ from the last written, or when
those are older than `refresh_s` (a node deleted and re-created meanwhile,
or annotations edited away, get them back then)."""

from __future__ import annotations

import time
from collections.abc import Callable


class AnnotationsWritten:
    def __init__(self, refresh_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh_s, self._clock = refresh_s, clock
        self._last: dict[str, tuple[dict[str, str], float]] = {}  # node -> (annotations, written at)

    def due(self, node: str, annotations: dict[str, str]) -> bool:
        """Whether `annotations` should be written on `node` now."""
        last = self._last.get(node)
        return (last is None or last[0] != annotations or self.refresh_s <= 0
                or self._clock() - last[1] >= self.refresh_s)

    def written(self, node: str, annotations: dict[str, str]) -> None:
        self._last[node] = (annotations, self._clock())

    def forget(self, node: str) -> None:
        """The node is gone (or the write failed): write it again next time."""
        self._last.pop(node, None)
