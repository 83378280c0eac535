"""What each tenant's placed pods hold, kept as holdings change (pure data).

The rule is `tenancy.tenant_usage` over every pod held; a scheduling cycle
of a cluster with quotas or groups needs it, and computing it from every
pod held costs 47–87 ms at 20,000 pods (`bench/tenant_usage.py`). The
ledger keeps, per pod, what it was charged as, so a pod's change takes its
old share (`tenancy.charge`) out and puts its new one in. `usage()` equals `tenant_usage` over the same
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
        # pod key -> (pod, (model, milli) per GPU) as charged: both frozen, so its share is
        # worked out again to take it out; references cost less than a copy of the share
        # (20,000 pods held in a cluster with quotas). A model changing rebuilds the ledger.
        self._charged: dict[str, tuple[PodLike, tuple[tuple[str, int], ...]]] = {}

    def set(self, key: str, pod: PodLike | None, gpus: Iterable[tuple[str, int]] = ()) -> None:
        """`pod` (None: nothing) holds `gpus`, (model, milli) per GPU, as of now."""
        entry = self._charged.pop(key, None)
        if entry is not None:
            self._add(*entry, -1)
        if pod is not None:
            entry = self._charged[key] = (pod, tuple(gpus))
            self._add(*entry, +1)

    def clear(self) -> None:
        self._held.clear()
        self._charging.clear()
        self._charged.clear()

    def usage(self) -> dict[str, dict[str, int]]:
        """Per tenant, what its pods hold: a copy (a cycle charges its own decisions into it)."""
        return {tenant: dict(held) for tenant, held in self._held.items()}

    def _add(self, pod: PodLike, gpus: tuple[tuple[str, int], ...], sign: int) -> None:
        share: dict[str, int] = {}
        charge(share, pod, gpus)
        held = self._held.setdefault(pod.tenant, {})
        charging = self._charging.setdefault(pod.tenant, {})
        for kind, amount in share.items():
            held[kind] = held.get(kind, 0) + sign * amount
            charging[kind] = charging.get(kind, 0) + sign
            if not charging[kind]:
                del held[kind], charging[kind]
        if not charging:
            del self._held[pod.tenant], self._charging[pod.tenant]
