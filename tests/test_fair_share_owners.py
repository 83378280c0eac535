"""Which Tenant objects own a user's FairShare (so that the API server's
garbage collector deletes it with the last of them): the tenants the
user's pods name that have an object, read from the bridge's tenant watch.
The end-to-end check (the object created so in the stand-in API server) is
in test_bridge_tenants.py; the stand-in has no garbage collector."""

from __future__ import annotations

from datetime import datetime, timezone

from tidal_bridge.tenants import TenantBridge, fair_share_object
from tidal_schemas import PodLifecycle

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Tenants:
    """The tenant watch as the bridge reads it: objects by (namespace, name)."""

    def __init__(self, *objects: dict) -> None:
        self.objects = {("", o["metadata"]["name"]): o for o in objects}

    def get(self, namespace: str, name: str) -> dict | None:
        return self.objects.get((namespace, name))


def tenant_object(name: str, uid: str) -> dict:
    return {"apiVersion": "tidal.dev/v1alpha1", "kind": "Tenant", "metadata": {"name": name, "uid": uid}}


def pod(name: str, user: str, tenant: str) -> PodLifecycle:
    return PodLifecycle(namespace="ns", name=name, phase="pending", user=user, tenant=tenant, created_at=T0)


def bridge_with(*objects: dict) -> TenantBridge:
    bridge = TenantBridge(service=None)
    bridge.reflector = Tenants(*objects)
    return bridge


def test_a_fair_share_is_owned_by_the_tenant_objects_of_its_users_pods():
    bridge = bridge_with(tenant_object("team-a", "uid-a"), tenant_object("team-b", "uid-b"),
                         tenant_object("team-c", "uid-c"))
    for p in (pod("p1", "alice", "team-b"), pod("p2", "alice", "team-a"), pod("p3", "alice", "no-object"),
              pod("p4", "alice", "team-a"), pod("p5", "bob", "team-c")):
        bridge.saw_pod(p)
    assert bridge.user_tenants == {"alice": {"team-a", "team-b", "no-object"}, "bob": {"team-c"}}
    created = fair_share_object("alice", bridge.owners("alice"))
    # sorted by tenant name; the tenant without an object owns nothing; team-c is bob's only
    assert created["metadata"] == {"name": "alice", "ownerReferences": [
        {"apiVersion": "tidal.dev/v1alpha1", "kind": "Tenant", "name": "team-a", "uid": "uid-a"},
        {"apiVersion": "tidal.dev/v1alpha1", "kind": "Tenant", "name": "team-b", "uid": "uid-b"}]}
    assert created["spec"] == {"user": "alice"} and created["kind"] == "FairShare"


def test_a_user_without_a_tenant_object_gets_a_fair_share_without_owners():
    bridge = bridge_with(tenant_object("team-a", "uid-a"))
    bridge.saw_pod(pod("p1", "carol", "default"))
    assert bridge.owners("carol") == [] and bridge.owners("never-seen") == []
    assert fair_share_object("carol", bridge.owners("carol"))["metadata"] == {"name": "carol"}
    # a user name that is no object name: the object's name is cleaned, the owners the same
    bridge.saw_pod(pod("p2", "Dave@Corp", "team-a"))
    created = fair_share_object("Dave@Corp", bridge.owners("Dave@Corp"))
    assert created["metadata"]["name"].startswith("dave-corp-")
    assert [o["uid"] for o in created["metadata"]["ownerReferences"]] == ["uid-a"]
