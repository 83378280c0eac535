"""The trace each decision continues: a decision has no cause event, so it
continues the trace of its pod's pending event (the bridge's, from the pod's
own annotations). Kept while the pod waits; a placed decision ends it, and
a placement after a rollback starts a trace of its own."""

from __future__ import annotations

from typing import Any

from tidal_bus.trace_context import TraceContext
from tidal_bus.tracing import current_trace
from tidal_schemas import PlacementDecision, PodLifecycle


class PodTraces:
    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], TraceContext | None] = {}

    def read(self, envelope: Any) -> None:
        """Note the trace of a pending pod's event (call while handling it)."""
        p = envelope.payload
        if not isinstance(p, PodLifecycle):
            return
        if p.phase == "pending" and not p.foreign:
            self._pending[envelope.cluster, p.event_key()] = current_trace()
        else:
            self._pending.pop((envelope.cluster, p.event_key()), None)

    def of(self, cluster: str, decision: PlacementDecision) -> TraceContext | None:
        """The trace `decision` continues; a placed decision takes it (the pod's trace ends there)."""
        key = (cluster, decision.event_key())
        return self._pending.pop(key, None) if decision.outcome == "placed" else self._pending.get(key)

    def __len__(self) -> int:
        return len(self._pending)
