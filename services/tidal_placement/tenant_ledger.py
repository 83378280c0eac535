"""What each tenant's placed pods hold, kept as holdings change (pure data).

The rule is `tenancy.tenant_usage` over every pod held; a scheduling cycle
of a cluster with quotas or groups needs it, and computing it from every
pod held costs 55–110 ms at 20,000 pods. The ledger keeps, per pod, what
`tenancy.charge` added for it, so a pod's change takes its old share out
and puts its new one in. `usage()` equals `tenant_usage` over the same
holdings, zero entries included: a tenant or kind is there while some pod
charges it (`tests/test_tenant_ledger.py` holds the two equal).
"""

from __future__ import annotations

from collections.abc import Iterable

from .kept import PodLike
from .tenancy import charge


class TenantLedger:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, int]] = {}  # tenant -> kind -> amount
        self._charging: dict[str, dict[str, int]] = {}  # tenant -> kind -> pods charging it
        self._charged: dict[str, tuple[str, dict[str, int]]] = {}  # pod key -> (tenant, what it added)

    def set(self, key: str, pod: PodLike | None, gpus: Iterable[tuple[str, int]] = ()) -> None:
        """`pod` (None: nothing) holds `gpus`, (model, milli) per GPU, as of now."""
        self._take_out(key)
        if pod is None:
            return
        added: dict[str, int] = {}
        charge(added, pod, gpus)
        self._charged[key] = (pod.tenant, added)
        held = self._held.setdefault(pod.tenant, {})
        charging = self._charging.setdefault(pod.tenant, {})
        for kind, amount in added.items():
            held[kind] = held.get(kind, 0) + amount
            charging[kind] = charging.get(kind, 0) + 1

    def clear(self) -> None:
        self._held.clear()
        self._charging.clear()
        self._charged.clear()

    def usage(self) -> dict[str, dict[str, int]]:
        """Per tenant, what its pods hold: a copy (a cycle charges its own decisions into it)."""
        return {tenant: dict(held) for tenant, held in self._held.items()}

    def _take_out(self, key: str) -> None:
        entry = self._charged.pop(key, None)
        if entry is None:
            return
        tenant, added = entry
        held, charging = self._held[tenant], self._charging[tenant]
        for kind, amount in added.items():
            held[kind] -= amount
            charging[kind] -= 1
            if not charging[kind]:
                del held[kind], charging[kind]
        if not charging:
            del self._held[tenant], self._charging[tenant]
