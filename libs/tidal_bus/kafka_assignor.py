"""A Kafka partition assignor that gives partition p of every topic to the
same process: bounded-load rendezvous hashing over the members' process ids
(sent as user data), the same rule the NATS membership uses. So a service reading
several node-keyed streams holds all the streams of its nodes."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from .membership import partition_owners


def rendezvous_assignor(process_id: str) -> type[AbstractPartitionAssignor]:
    """An assignor class for one process (aiokafka uses assignor classes)."""

    class RendezvousAssignor(AbstractPartitionAssignor):
        name = "tidal-rendezvous"
        version = 0

        @classmethod
        def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(cls.version, list(topics), process_id.encode())

        @classmethod
        def assign(cls, cluster: ClusterMetadata,
                   members: Mapping[str, ConsumerProtocolMemberMetadata]) -> dict[str, ConsumerProtocolMemberAssignment]:
            assignment: dict[str, dict[str, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(list))
            topics = sorted({t for m in members.values() for t in m.subscription})
            for topic in topics:
                subscribed = {m_id: (m.user_data or m_id.encode()).decode()
                              for m_id, m in members.items() if topic in m.subscription}
                owners = partition_owners(cluster.partitions_for_topic(topic) or (), subscribed.values())
                for partition, owner in sorted(owners.items()):
                    member = min(m_id for m_id, proc in subscribed.items() if proc == owner)
                    assignment[member][topic].append(partition)
            return {m_id: ConsumerProtocolMemberAssignment(cls.version, sorted(assignment[m_id].items()), b"")
                    for m_id in members}

        @classmethod
        def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
            return None

    return RendezvousAssignor
