"""The bridge's watch of Node objects: kept for the binder's checks (exists,
not cordoned), and published as node-level facts (`node.topology`) when
`publish_node_facts` is on (see the service's docstring for why it is off
by default)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidal_schemas import NodeTopology

from .kube import Kube
from .nodes import node_topology
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
        self.reflector: Reflector | None = None

    def connect(self, kube: Kube, settings: BridgeSettings) -> None:
        """Once the API server is reached (the service's start)."""
        self.reflector = Reflector.of(kube, "nodes", self.on_node, settings, keep=slim_node)

    async def on_node(self, change: Change) -> None:
        service = self.service
        meta = change.object.get("metadata") or {}
        if change.type == "DELETED":
            self.facts.pop(meta.get("name", ""), None)
            service.log.info("node %s deleted", meta.get("name"))
            return
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
