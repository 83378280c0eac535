"""The bridge's watch of Node objects: kept for the binder's checks (exists,
not cordoned); each node's status.allocatable published (`node.status`) when
its CPU or memory changed, and once when the node is deleted; published as
node-level facts (`node.topology`) when `publish_node_facts` is on (see the
service's docstring for why it is off by default).

Every replica watches every node and publishes, as for pods: event ids come
from (cluster, node uid, resourceVersion), or (…, "deleted"), so a second
replica's events are the first's and the bus drops them. "Changed" is
against what this process published last: after a restart each node's
figure is published once again (the same figure: placement books nothing
new on it). A node deleted while no bridge ran is caught at start, as a
tenant is (tenants.py): once the first list is in, every node whose last
`node.status` of this cluster is not a deletion and that no Node object
names any more is published deleted (`reconcile`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tidal_bus import StartAt
from tidal_schemas import NodeStatus, NodeTopology, derived_id

from .kube import Kube
from .nodes import node_status, node_topology
from .settings import BridgeSettings
from .watch import Change, Reflector

if TYPE_CHECKING:
    from .service import BridgeService


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """What the binder reads of a node: a node's status (its images, its
    conditions) is most of its size, and 5,000 of them would be hundreds of MiB."""
    return {"metadata": node.get("metadata") or {}, "spec": node.get("spec") or {}}


class NodeWatch:
    def __init__(self, service: "BridgeService") -> None:
        self.service = service
        self.facts: dict[str, NodeTopology] = {}  # name -> last published
        self.status: dict[str, NodeStatus] = {}  # name -> last published
        self.reflector: Reflector | None = None
        self._publishing = asyncio.Lock()  # a node's status and the reconcile's deletion of it, in turn

    def connect(self, kube: Kube, settings: BridgeSettings) -> None:
        """Once the API server is reached (the service's start)."""
        self.reflector = Reflector.of(kube, "nodes", self.on_node, settings, keep=slim_node)

    async def on_node(self, change: Change) -> None:
        async with self._publishing:
            await self._on_node(change)

    async def _on_node(self, change: Change) -> None:
        service = self.service
        meta = change.object.get("metadata") or {}
        if change.type == "DELETED":
            self.facts.pop(meta.get("name", ""), None)
            service.log.info("node %s deleted", meta.get("name"))
            if self.status.pop(meta.get("name", ""), None) is not None:
                await service.publish(NodeStatus(node=meta["name"], deleted=True),
                                      event_id=service.event_id(meta.get("uid", ""), NodeStatus.TYPE, "deleted"))
            return
        await self._status(change.object, meta)
        if not service.settings.publish_node_facts:
            return
        topology, problem = node_topology(change.object, service.settings.gpu_resource)
        if topology is None:
            service.log.warning("node facts not published: %s", problem)
            return
        if self.facts.get(topology.node) == topology:
            return
        await service.publish(topology, event_id=service.event_id(meta.get("uid", ""), NodeTopology.TYPE,
                                                                  str(meta.get("resourceVersion"))))
        self.facts[topology.node] = topology

    async def _status(self, node: dict[str, Any], meta: dict[str, Any]) -> None:
        status, problem = node_status(node)
        if status is None:
            if problem:
                self.service.log.warning("node status not published: %s", problem)
            return
        if self.status.get(status.node) == status:
            return
        await self.service.publish(status, event_id=self.service.event_id(meta.get("uid", ""), NodeStatus.TYPE,
                                                                          str(meta.get("resourceVersion"))))
        self.status[status.node] = status

    async def reconcile(self) -> None:
        """Publish the deletion of the nodes that went while no bridge ran
        (see the module docstring)."""
        await self.reflector.synced.wait()
        service, last = self.service, {}
        try:
            async for _, event in service.bus.read(NodeStatus.TYPE, StartAt.earliest()):
                if not isinstance(event, Exception) and event.cluster == service.settings.cluster:
                    last[event.payload.node] = event
        except Exception as exc:  # the bus away: the next start tries again; the service goes on
            service.log.warning("nodes deleted while the bridge was down not checked: %r", exc)
            return
        present = {name for _, name in self.reflector.names()}
        for name, event in sorted(last.items()):
            async with self._publishing:  # not between a node's new status and its record here
                if event.payload.deleted or name in present or name in self.status:
                    continue
                await service.publish(NodeStatus(node=name, deleted=True),
                                      event_id=derived_id(event.id, NodeStatus.TYPE, "deleted"))
            service.log.info("node %s: its object went while the bridge was down; deleted", name)
