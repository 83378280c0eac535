"""How many events one pod may cost the API server (pure): client-go's
spam filter (`EventSourceObjectSpamFilter`), a token bucket per object —
`burst` events at once, then one more every `refill_s` — so a pod tried
every cycle cannot flood the API server. The buckets of at most
`max_keys` objects are kept (the least recently used go first), as
client-go keeps an LRU of 4096."""

from __future__ import annotations

from collections import OrderedDict


class EventBudget:
    def __init__(self, burst: int = 25, refill_s: float = 300.0, max_keys: int = 4096) -> None:
        if burst < 1 or refill_s <= 0 or max_keys < 1:
            raise ValueError("burst and max_keys must be at least 1, refill_s above 0")
        self.burst, self.refill_s, self.max_keys = burst, refill_s, max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def allow(self, key: str, now: float) -> bool:
        """Take a token from `key`'s bucket at `now` (seconds); False when empty."""
        tokens, at = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + max(now - at, 0.0) / self.refill_s)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return allowed

    def forget(self, key: str) -> None:
        self._buckets.pop(key, None)
