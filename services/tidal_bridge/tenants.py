"""Tenants and fair share as Kubernetes objects (group tidal.dev).

- `Tenant` objects → `tenant.config`: a created or changed spec is read by
  the rule `tidal tenants apply` uses (`tidal_schemas.tenancy.tenant_config`)
  and published; a deleted object publishes the tenant's deletion. Event
  ids come from (cluster, uid, generation), so a relist or a second
  replica republishes nothing new, and a status write (no new generation)
  publishes nothing. The CRD's CEL rules refuse at admission a spec the
  model refuses (group names repeated, groups and autoGrouping together);
  one that gets past them all the same (an API server without CEL, an
  object stored before the rules) is not published: the object gets
  `Ready=False`, reason `InvalidSpec`, with a message naming the field,
  and placement keeps the last good spec (one too large for the bus:
  reason `NotPublishable`). A spec in the former snake_case spelling is
  published, its Ready message (and the log) naming each deprecated key.
- A Tenant deleted while no bridge ran is caught at start: once the first
  list is in, every tenant whose last `tenant.config` this cluster's bridge
  published and that no object names any more is deleted.
- `tenant.usage` → the Tenant's status (held against quota, free groups);
  `score.user` → the user's `FairShare` status (created when missing).
  Both through the rate-limited `StatusWriter`.
- A `FairShare` is created owned (`ownerReferences`) by the `Tenant`
  objects of its user's tenants, as the user's pods name them: the API
  server's garbage collector deletes it with the last of them. A user
  scored after that gets a new one, owned by the tenants that exist then;
  one whose tenants have no `Tenant` object gets one without owners.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from tidal_bus import Delivery, EventTooLarge, StartAt
from tidal_clock import now_utc
from tidal_schemas import Envelope, PodLifecycle, SchemaError, TenantConfig, TenantUsage, UserScore, derived_id
from tidal_schemas.tenancy import (API_VERSION, Condition, FairShareSpec, FairShareStatus, TenantDocumentError,
                                   TenantStatus, deprecated_keys, fair_share_name, gpu_summary, tenant_config,
                                   tenant_deletion)

from .kube import Kube
from .settings import BridgeSettings
from .status_writer import StatusWriter
from .watch import Change, Reflector

log = logging.getLogger("tidal.bridge.tenants")

TENANTS, FAIR_SHARES = "tenants", "fairshares"
READY = "Ready"


def ready_condition(ok: bool, reason: str, message: str, generation: int, now: datetime,
                    previous: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The Ready condition to write; its transition time moves only when
    its status does (as metav1.Condition's)."""
    status = "True" if ok else "False"
    before = next((c for c in previous or [] if c.get("type") == READY), None)
    since = before["lastTransitionTime"] if before and before.get("status") == status and \
        before.get("lastTransitionTime") else now
    condition = Condition(type=READY, status=status, reason=reason, message=message, observed_generation=generation,
                          last_transition_time=since)
    return condition.model_dump(by_alias=True, mode="json")


def usage_status(usage: TenantUsage) -> dict[str, Any]:
    """A Tenant's status fields for what it holds (conditions left alone)."""
    free = sorted(name for name, count in usage.groups_free.items() if count > 0)
    status = TenantStatus(held=usage.held, quota=usage.quota, gpus=gpu_summary(usage.held, usage.quota),
                          free_groups=free, free_group_count=len(free), updated_at=usage.measured_at)
    return status.model_dump(by_alias=True, mode="json", exclude={"conditions"})


def score_status(score: UserScore) -> dict[str, Any]:
    """A FairShare's status fields for one resource type's score."""
    status = FairShareStatus(scores={score.resource_type: score.score}, usage={score.resource_type: score.usage},
                             last_update=score.updated_at)
    return status.model_dump(by_alias=True, mode="json")


def fair_share_object(user: str, owners: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """A user's new `FairShare`, owned by `owners` (Tenant objects)."""
    meta: dict[str, Any] = {"name": fair_share_name(user)}
    if owners:
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": "Tenant", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]} for owner in owners]
    return {"apiVersion": API_VERSION, "kind": "FairShare", "metadata": meta,
            "spec": FairShareSpec(user=user).model_dump(by_alias=True, mode="json")}


class TenantBridge:
    """The bridge's tenant jobs; `service` publishes and knows the cluster."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.published: dict[str, tuple[str, int]] = {}  # name -> (uid, generation) published
        self.status: StatusWriter | None = None
        self.reflector: Reflector | None = None
        self.user_tenants: dict[str, set[str]] = {}  # user -> tenants their pods named (since the start)

    def connect(self, kube: Kube, settings: BridgeSettings) -> None:
        """Once the API server is reached (the service's start)."""
        self.status = StatusWriter(kube, settings.status_interval_s)
        self.reflector = Reflector.of(kube, TENANTS, self.on_tenant, settings)

    def loops(self) -> list:
        return [self.reflector.run, self.status.run, self.reconcile]

    def saw_pod(self, pod: PodLifecycle) -> None:
        """Note a pod's user and tenant: the owners of the user's FairShare."""
        tenants = self.user_tenants.get(pod.user)
        if tenants is None:
            self.user_tenants[pod.user] = {pod.tenant}
        elif pod.tenant not in tenants:
            tenants.add(pod.tenant)

    def owners(self, user: str) -> list[dict[str, Any]]:
        """The Tenant objects of the user's tenants that exist now, by name."""
        found = (self.reflector.get("", name) for name in sorted(self.user_tenants.get(user, ())))
        return [obj for obj in found if obj and (obj.get("metadata") or {}).get("uid")]

    def _event_id(self, uid: str, version: str) -> str:
        return derived_id(f"kube:{self.service.settings.cluster}:{uid}", TenantConfig.TYPE, version)

    async def on_tenant(self, change: Change) -> None:
        meta = change.object.get("metadata") or {}
        name, uid, generation = meta.get("name", ""), meta.get("uid", ""), int(meta.get("generation") or 1)
        if change.type == "DELETED":
            self.status.forget(TENANTS, name)
            self.published.pop(name, None)
            await self.service.publish(tenant_deletion(name), event_id=self._event_id(uid, "deleted"))
            log.info("tenant %s deleted", name)
            return
        if self.published.get(name) == (uid, generation):
            return  # a status write: the spec is what was published
        now = now_utc(self.service.clock)
        conditions = (change.object.get("status") or {}).get("conditions")
        try:
            config = tenant_config(change.object)
            await self.service.publish(config, event_id=self._event_id(uid, str(generation)))
        except (TenantDocumentError, EventTooLarge, SchemaError) as exc:  # retrying the same spec cannot help
            log.warning("tenant %s not published: %s", name, exc)
            reason = "InvalidSpec" if isinstance(exc, TenantDocumentError) else "NotPublishable"
            condition = ready_condition(False, reason, str(exc), generation, now, conditions)
        else:
            message = f"generation {generation} published as tenant.config"
            warnings = deprecated_keys(change.object)
            if warnings:
                log.warning("tenant %s: %s", name, "; ".join(warnings))
                message += "; " + "; ".join(warnings)
            condition = ready_condition(True, "Published", message, generation, now, conditions)
        self.published[name] = (uid, generation)
        self.status.put(TENANTS, name, {"conditions": [condition]})

    async def reconcile(self) -> None:
        """Delete the tenants this cluster's bridge published whose objects
        went while it was down (after the first list; see the module docstring)."""
        await self.reflector.synced.wait()
        cluster, last = self.service.settings.cluster, {}
        try:
            async for _, event in self.service.bus.read(TenantConfig.TYPE, StartAt.earliest()):
                if not isinstance(event, Exception) and event.cluster == cluster:
                    last[event.payload.tenant] = event
        except Exception as exc:  # the bus away: the next start tries again; the service goes on
            log.warning("tenants deleted while the bridge was down not checked: %r", exc)
            return
        present = {name for _, name in self.reflector.names()}
        for name, event in sorted(last.items()):
            if event.source == "bridge" and not event.payload.deleted and name not in present:
                await self.service.publish(tenant_deletion(name),
                                           event_id=derived_id(event.id, TenantConfig.TYPE, "deleted"))
                log.info("tenant %s: its object went while the bridge was down; deleted", name)

    async def on_usage(self, envelope: Envelope[TenantUsage], delivery: Delivery) -> None:
        if envelope.cluster == self.service.settings.cluster:
            self.status.put(TENANTS, envelope.payload.tenant, usage_status(envelope.payload))

    async def on_score(self, envelope: Envelope[UserScore], delivery: Delivery) -> None:
        score = envelope.payload
        if envelope.cluster == self.service.settings.cluster:
            self.status.put(FAIR_SHARES, fair_share_name(score.user), score_status(score),
                            create=fair_share_object(score.user, self.owners(score.user)))
