"""No node speaks for another (issue 17, item 1).

A node agent's credentials let it publish only under its own node's key and
its cluster (`tidal nats-config`). That alone did not stop it: on its own
subject it could publish an event whose envelope or payload names node-b,
and consumers believed the payload. Now every consumer checks that the
subject's key and cluster, the envelope's key and cluster and the payload's
node agree, and a mismatch goes to `dead.letter` with the reason and is
counted; event ids are scoped to the publisher's key, so an id squatted
under node-a's subject never suppresses node-b's event.

The server runs the config `tidal nats-config` writes (operator mode, no
user listed), and every party logs in with its generated `.creds` file.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from builders import metrics
from conftest import NATS_TEST_OPTIONS, patience, wait_until
from tidal_bus import Bus, StartAt
from tidal_bus.auth import BusAuth
from tidal_bus.embedded import EmbeddedNats
from tidal_bus.intake import accept, dedupe_key
from tidal_cli.main import main as tidal
from tidal_runtime.metrics import ServiceMetrics
from tidal_schemas import (
    ActionResult,
    Envelope,
    NodeAction,
    NodeTopology,
    Resources,
    SchemaError,
    derived_id,
    encode,
    make_envelope,
)
from tidal_schemas.streams import partition_for, stream

CLUSTER = "c1"
NODES = ["node-a", "node-b"]
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Generated:
    """A nats-server run with `tidal nats-config` output; a Bus per user."""

    def __init__(self, server: EmbeddedNats, namespace: str, credentials) -> None:
        self.server, self.namespace, self.credentials = server, namespace, credentials

    def bus(self, user: str, **options) -> Bus:
        return Bus.from_url(self.server.url, namespace=self.namespace, cluster=CLUSTER, source=user,
                            auth=BusAuth(creds_file=self.credentials / f"{user}.creds"),
                            **{**NATS_TEST_OPTIONS, "connect_deadline_s": 10.0, "publish_timeout_s": 10.0,
                               **options})


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    namespace = "i" + uuid.uuid4().hex[:10]
    directory = tmp_path_factory.mktemp("identity")
    config, credentials = directory / "nats.conf", directory / "creds"
    assert tidal(["nats-config", "--namespace", namespace, "--cluster", CLUSTER, "--nodes", ",".join(NODES),
                  "--out", str(config), "--credentials-dir", str(credentials), "--store-dir", ""]) == 0
    server = EmbeddedNats(directory / "server", config_file=config).start()
    yield Generated(server, namespace, credentials)
    server.stop()


def forged(payload: Any, *, key: str | None = None, cluster: str = CLUSTER, event_id: str | None = None) -> bytes:
    """An envelope built by hand, as an attacker would: any key, cluster and id."""
    model = type(payload)
    return encode(Envelope[model](id=event_id or str(uuid.uuid4()), type=model.TYPE, version=1, cluster=cluster,
                                  key=key or payload.event_key(), time=T0, source="topology", payload=payload))


def topology(node: str, cpus: int) -> NodeTopology:
    return NodeTopology(node=node, capacity=Resources(cpu_milli=cpus * 1000, memory_mib=1024),
                        allocatable=Resources(cpu_milli=cpus * 1000, memory_mib=1024))


def result(node: str, action_id: str = "act-1") -> ActionResult:
    return ActionResult(action_id=action_id, node=node, kind="freeze", pod="default/p", status="done")


# -- the rule, as a table --------------------------------------------------------------------------------------

@pytest.mark.parametrize("subject_key, subject_cluster, envelope_key, envelope_cluster, payload_node, refused", [
    ("node-a", "c1", "node-a", "c1", "node-a", None),
    ("node-a", "c1", "node-a", "c1", "node-b", "envelope key 'node-a' but the payload is about 'node-b'"),
    ("node-a", "c1", "node-b", "c1", "node-b", "published under key 'node-a' but the event is about 'node-b'"),
    ("node-a", "c1", "node-a", "c2", "node-a", "published in cluster 'c1' but the event says 'c2'"),
    (None, None, "node-b", "c2", "node-b", None),  # a reader that knows no subject checks the rest
])
def test_an_event_is_accepted_only_when_subject_envelope_and_payload_agree(
        subject_key, subject_cluster, envelope_key, envelope_cluster, payload_node, refused):
    data = forged(metrics(payload_node), key=envelope_key, cluster=envelope_cluster)
    if refused is None:
        assert accept(data, "node.metrics", key=subject_key, cluster=subject_cluster).payload.node == payload_node
        return
    with pytest.raises(SchemaError) as caught:
        accept(data, "node.metrics", key=subject_key, cluster=subject_cluster)
    assert str(caught.value).startswith("identity: ") and refused in str(caught.value)


def test_every_stream_keys_its_events_by_what_the_payload_is_about():
    """The rule holds for every event type: a decision is keyed by its pod,
    a tenant's config by the tenant, and so on; node events by their node."""
    action = NodeAction(action_id="a1", node="node-b", kind="freeze", pod="default/p", reason="hot")
    for payload in (action, result("node-b"), topology("node-b", 4), metrics("node-b")):
        assert make_envelope(payload, cluster=CLUSTER, source="t").key == "node-b"
        assert accept(encode(make_envelope(payload, cluster=CLUSTER, source="t")), payload.TYPE,
                      key="node-b", cluster=CLUSTER).payload == payload


def test_ids_are_scoped_to_the_publishers_key():
    assert dedupe_key("c1", "node-a", "x") != dedupe_key("c1", "node-b", "x")
    assert dedupe_key("c1", "node-a", "x") != dedupe_key("c2", "node-a", "x")


# -- over the real server, with the generated users ------------------------------------------------------------

async def _consume(bus: Bus, stream_name: str, group: str, handled: list, metrics_: ServiceMetrics):
    async def handle(envelope, delivery):
        handled.append(envelope)

    consumer = bus.consumer(stream_name, group, handle, observer=metrics_)
    task = asyncio.create_task(consumer.run())
    await asyncio.wait_for(consumer.ready.wait(), patience(15))
    return consumer, task


async def _dead_letters(generated: Generated, stream_name: str) -> list:
    async with generated.bus("admin") as admin:
        return [event.payload async for _, event in admin.read("dead.letter", StartAt.earliest())
                if not isinstance(event, SchemaError) and event.payload.stream == stream_name]


async def test_node_a_cannot_speak_for_node_b_on_its_own_subjects(generated):
    """Each forgery of the issue, published with node-a's credentials on
    node-a's own allowed subjects, is dead-lettered with the reason and
    counted by the consumer group that read it (scoring's on node.metrics,
    oversell's on node.topology); node-a's true events are handled."""
    async with generated.bus("admin") as admin:
        await admin.ensure_streams()
    async with generated.bus("topology-node-a") as agent_a:
        raw = agent_a.backend
        forgeries = {
            "node.topology": [forged(topology("node-b", 64), key="node-a"),   # payload names node-b
                              forged(topology("node-a", 64), cluster="c2")],  # another cluster
            "node.metrics": [forged(metrics("node-b"), key="node-a"),
                             forged(metrics("node-b"), key="node-b")],  # published under node-a's key anyway
        }
        for name, messages in forgeries.items():
            for data in messages:
                await raw.publish(stream(name), CLUSTER, "node-a", data, str(uuid.uuid4()))
        await agent_a.publish(topology("node-a", 8))
        await agent_a.publish(metrics("node-a"))

    seen: dict[str, list] = {"node.topology": [], "node.metrics": []}
    counters = {"node.topology": ServiceMetrics("oversell"), "node.metrics": ServiceMetrics("scoring")}
    running = []
    for name, user in (("node.topology", "oversell"), ("node.metrics", "scoring")):
        bus = generated.bus(user)
        await bus.__aenter__()
        consumer, task = await _consume(bus, name, f"{user}-{CLUSTER}", seen[name], counters[name])
        running.append((bus, consumer, task))
    try:
        await wait_until(lambda: all(len(seen[n]) == 1 and counters[n].dead_letters.labels(
            counters[n].service, n)._value.get() == len(forgeries[n]) for n in seen),
            timeout=20, what="the true events handled and every forgery dead-lettered")
    finally:
        for bus, consumer, task in running:
            consumer.stop()
            await asyncio.wait_for(task, patience(15))
            await bus.__aexit__(None, None, None)
    assert [e.payload.node for e in seen["node.topology"]] == ["node-a"]
    assert seen["node.topology"][0].payload.capacity.cpu_milli == 8000  # not the forged 64 CPUs
    assert [e.payload.node for e in seen["node.metrics"]] == ["node-a"]
    for name, count in (("node.topology", 2), ("node.metrics", 2)):
        letters = await _dead_letters(generated, name)
        assert len(letters) == count
        assert all(letter.reason.startswith("identity: ") and letter.key == "node-a" for letter in letters)
    reasons = {letter.reason for letter in await _dead_letters(generated, "node.topology")}
    assert any("the payload is about 'node-b'" in r for r in reasons)
    assert any("published in cluster 'c1' but the event says 'c2'" in r for r in reasons)


async def test_a_squatted_event_id_does_not_suppress_node_bs_result(generated):
    """node-a reads node-b's action, computes the id of node-b's future
    result (`derived_id` of the cause) and publishes first, on its own
    subject, both a result naming node-b and one naming itself under that
    id, with message-id headers of its choice. The broker keeps node-b's real result, a reader sees it, a consumer
    group handles it, and the forgery naming node-b is refused."""
    async with generated.bus("admin") as admin:
        await admin.ensure_streams()
    async with generated.bus("oversell") as oversell:
        cause = await oversell.publish(NodeAction(action_id="act-1", node="node-b", kind="freeze",
                                                  pod="default/p", reason="hot"))
    squatted = derived_id(cause.id, "action.result", "node-b")
    async with generated.bus("topology-node-a") as agent_a:
        # A hand-made client sets any message-id header: the plain id, and the
        # form Tidal scopes broker ids with, naming node-b.
        subject = f"{generated.namespace}.action_result.{CLUSTER}.{partition_for('node-a', 8)}.node-a"
        for payload, header in ((result("node-b"), squatted), (result("node-a"), dedupe_key(CLUSTER, "node-b",
                                                                                              squatted))):
            await agent_a.backend.js.publish(subject, forged(payload, key="node-a", event_id=squatted),
                                             headers={"Nats-Msg-Id": header}, timeout=patience(5))
    async with generated.bus("topology-node-b") as agent_b:
        real = await agent_b.publish(result("node-b"), cause=cause)
    assert real.id == squatted

    async with generated.bus("oversell") as oversell:  # oversell reads action.result whole, without a group
        read = [(raw.key, event) async for raw, event in oversell.read("action.result", StartAt.earliest())]
    accepted = [(key, e.payload.node) for key, e in read if not isinstance(e, SchemaError)]
    assert accepted == [("node-a", "node-a"), ("node-b", "node-b")]
    refused = [str(e) for _, e in read if isinstance(e, SchemaError)]
    assert len(refused) == 1 and refused[0].startswith("identity: ")

    handled: list = []
    counter = ServiceMetrics("admin")
    async with generated.bus("admin") as admin:
        consumer, task = await _consume(admin, "action.result", "results-" + uuid.uuid4().hex[:6], handled, counter)
        try:
            await wait_until(lambda: len(handled) == 2, timeout=15, what="both true results handled")
            await asyncio.sleep(0.3)  # nothing more arrives: the forgery naming node-b was dead-lettered
        finally:
            consumer.stop()
            await asyncio.wait_for(task, patience(15))
    assert sorted((e.key, e.id) for e in handled) == [("node-a", squatted), ("node-b", squatted)]
    assert counter.duplicates.labels("admin", "action.result")._value.get() == 0
    assert counter.dead_letters.labels("admin", "action.result")._value.get() == 1


def test_the_streams_without_a_broker_id_are_exactly_those_node_agents_write():
    """The broker's duplicate window is skipped where, and only where, a
    node agent may publish (its rights come from the same table)."""
    from tidal_bus.nats_permissions import ACCESS
    from tidal_schemas.streams import STREAMS

    assert {name for name, spec in STREAMS.items() if spec.written_by_nodes} == set(ACCESS["topology"].publishes)


async def test_what_a_node_agents_credentials_can_and_cannot_do(generated):
    """The table in docs/security.md, row by row (the forged-identity rows
    are the tests above; the consumer-group row is in test_security_nats_auth)."""
    from tidal_bus.auth import BusPermissionError
    from tidal_schemas import PlacementDecision, PlacementDecisions

    async with generated.bus("admin") as admin:
        await admin.ensure_streams()
    async with generated.bus("oversell") as oversell:
        await oversell.publish(NodeAction(action_id="act-9", node="node-b", kind="freeze", pod="default/p",
                                          reason="hot"))
    async with generated.bus("topology-node-a") as agent_a:
        await agent_a.publish(metrics("node-a"))  # can: its own node
        await agent_a.publish(result("node-a", "act-own"))
        actions = [e.payload.node async for _, e in agent_a.read("node.action", StartAt.earliest())
                   if not isinstance(e, SchemaError)]
        assert "node-b" in actions  # can read every node's actions
        for forbidden in (metrics("node-b"), result("node-b"),  # node-b's subjects
                          NodeAction(action_id="a", node="node-a", kind="freeze", pod="default/p", reason="x"),
                          PlacementDecisions.of(PlacementDecision(decision_id="d", namespace="default", name="p",
                                                                  outcome="placed", node="node-a"))):
            with pytest.raises(BusPermissionError):
                await agent_a.publish(forbidden)
