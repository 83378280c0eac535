"""The trace each decision continues: a decision has no cause event, so it
continues the trace of its pod's pending event (the bridge's, from the pod's
own annotations). Kept while the pod waits; a placed decision ends it, and
a placement after a rollback starts a trace of its own. A decision names
its trace itself (`PlacementDecision.trace`): one event carries the
decisions of many pods."""

from __future__ import annotations

from typing import Any

from tidal_bus.trace_context import TRACEPARENT, TraceContext
from tidal_bus.tracing import created, current_trace
from tidal_schemas import PlacementDecisions, PodLifecycle


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

    def of(self, cluster: str, pod: str, placed: bool) -> TraceContext | None:
        """The trace a decision for `pod` continues; a placed decision takes
        it (the pod's trace ends there)."""
        key = (cluster, pod)
        return self._pending.pop(key, None) if placed else self._pending.get(key)

    def fields(self, cluster: str, pod: str, placed: bool) -> dict[str, str]:
        """The decision's fields naming the trace it continues (`of`), from
        the decision's own PRODUCER span there when spans are on."""
        context = created("placement", PlacementDecisions.TYPE, cluster, pod, self.of(cluster, pod, placed))
        if context is None:
            return {}
        return {"trace": context.headers()[TRACEPARENT], "trace_state": context.state}

    def __len__(self) -> int:
        return len(self._pending)
