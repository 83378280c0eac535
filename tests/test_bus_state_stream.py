"""Tenant configuration never ages out: `tenant.config` keeps the last event
of every (cluster, tenant) whatever its age — one message per subject and no
age limit on NATS, a compacted topic on Kafka — and a deletion is an event."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from conftest import make_bus
from tidal_bus import StartAt
from tidal_bus.kafka_records import event_key, record_key
from tidal_bus.kafka_topics import topic_configs
from tidal_bus.kafka_replication import replication_for
from tidal_bus.subjects import kafka_topic, nats_stream_name
from tidal_schemas import TenantConfig
from tidal_schemas.streams import STREAMS, stream


def test_only_state_streams_keep_the_last_event_per_key():
    # tenant.usage: what each tenant holds now, shown on its Tenant object after a bridge restart
    # node.status: each node's status.allocatable, as long as the node lives, however long unchanged
    assert [s.name for s in STREAMS.values() if s.keep_last_per_key] == ["tenant.config", "tenant.usage",
                                                                          "node.status"]
    one_copy = replication_for(1)
    assert topic_configs(stream("tenant.config"), one_copy)["cleanup.policy"] == "compact"
    assert topic_configs(stream("tenant.config"), one_copy)["retention.ms"] == "-1"
    assert "cleanup.policy" not in topic_configs(stream("node.metrics"), one_copy)


@pytest.mark.parametrize("cluster, key", [("c1", "team-a"), ("prod_eu", "ns/pod"), ("c-2", "a/b/c")])
def test_kafka_record_keys_carry_the_cluster_and_give_the_event_key_back(cluster, key):
    assert record_key(cluster, key).startswith(f"{cluster}/")
    assert event_key(record_key(cluster, key)) == key


async def test_nats_keeps_each_tenants_last_config_without_an_age_limit(nats_server, namespace):
    bus = make_bus(nats_server.url, namespace)
    async with bus:
        await bus.ensure_streams()
        info = await bus.backend.js.stream_info(nats_stream_name(namespace, stream("tenant.config")))
        assert info.config.max_msgs_per_subject == 1
        assert not info.config.max_age  # 0: kept for as long as it is not replaced
        other = make_bus(nats_server.url, namespace, cluster="c2")
        async with other:
            await bus.publish(TenantConfig(tenant="team-a", quota={"A100": 1000}))
            await bus.publish(TenantConfig(tenant="team-b", quota={"V100": 1000}))
            await other.publish(TenantConfig(tenant="team-a", quota={"T4": 500}))  # same name, other cluster
            await bus.publish(TenantConfig(tenant="team-a", quota={"A100": 2000}))
            await bus.publish(TenantConfig(tenant="team-b", deleted=True))
        kept = [(e.cluster, e.payload.tenant, e.payload.quota, e.payload.deleted)
                async for _, e in bus.read("tenant.config", StartAt.earliest())]
    assert sorted(kept) == [("c1", "team-a", {"A100": 2000}, False), ("c1", "team-b", {}, True),
                            ("c2", "team-a", {"T4": 500}, False)]


async def test_kafka_tenant_config_is_a_compacted_topic(kafka_server, namespace):
    bus = make_bus(kafka_server.url, namespace)
    async with bus:
        await bus.ensure_streams()
        await bus.publish(TenantConfig(tenant="team-a", quota={"A100": 1000}))
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_server.url.removeprefix("kafka://"))
        await admin.start()
        try:
            topic = kafka_topic(namespace, stream("tenant.config"))
            described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        finally:
            await admin.close()
        read = [e.payload.tenant async for _, e in bus.read("tenant.config", StartAt.earliest())]
    configs = {name: value for name, value, *_ in described[0].resources[0][4]}
    assert configs.get("cleanup.policy") == "compact"
    assert read == ["team-a"]


def test_a_deleted_tenant_carries_no_configuration():
    with pytest.raises(ValueError, match="carries no configuration"):
        TenantConfig(tenant="team-a", deleted=True, quota={"A100": 1000})
