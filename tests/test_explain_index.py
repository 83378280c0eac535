"""`tidal explain` from the decision log's index (NATS): the work is flat in
the log's length. Each log is filled with N and then 10N events of other
pods' decisions (batches of four) before — or, for a bound pod, after — the
pod's own decision, and the messages the lookup reads are counted: the same
for both. The whole-log read (the reference; Kafka's lookup reads the log
back from its end instead: test_explain_kafka.py) reads them all, and gives
the same answer: the index changes the cost, not the decision (fences
included: a deposed leader's late decision never counts).

Every test has its own namespace on the embedded NATS server (Kafka too,
for the command's end-to-end run)."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from builders import pod
from conftest import make_bus
from tidal_cli import main as cli
from tidal_cli.decision_lookup import read_whole_log
from tidal_cli.explain_cmd import lookup
from tidal_schemas import BindResult, PlacementDecision, PlacementDecisions
from tidal_schemas.fence import fence_decision

N = 40
CLUSTER = "c1"


def decision(name: str, did: str, *, namespace: str = "ns", outcome: str = "pending", epoch: int = 0,
             leader: str = "", node: str | None = None) -> PlacementDecision:
    return PlacementDecision(decision_id=did, namespace=namespace, name=name, outcome=outcome, epoch=epoch,
                             leader=leader, node=node if outcome == "placed" else None,
                             reason="" if outcome == "placed" else "0/3 nodes are available: 3 Insufficient cpu.")


async def fill(bus, events: int, tag: str, **fence) -> None:
    """`events` decision events of other pods, four decisions each."""
    for e in range(events):
        await bus.publish(PlacementDecisions(items=[decision(f"other-{tag}-{e}-{i}", f"d-{tag}-{e}-{i}", **fence)
                                                    for i in range(4)]))


async def pending_log(bus, before: int) -> None:
    """`before` events of others, then the pod's decision second in a batch
    (its key is not the batch's), then a few more events of others."""
    await fill(bus, before, "before")
    await bus.publish(PlacementDecisions(items=[decision("lead", "d-lead"), decision("web", "d-web-1")]))
    await bus.publish(PlacementDecisions(items=[decision("lead", "d-lead-2"), decision("web", "d-web-2"),
                                                decision("tail", "d-tail")]))
    await fill(bus, 3, "after")


async def bound_log(bus, after: int, **asks) -> None:
    """The pod placed (third in its batch), bound, then `after` events of others."""
    await fill(bus, 2, "before")
    await bus.publish(PlacementDecisions(items=[decision("a", "d-a"), decision("b", "d-b"),
                                                decision("web", "d-web", outcome="placed", node="n7")]))
    await bus.publish(BindResult(decision_id="d-web", namespace="ns", name="web", node="n7", ok=True))
    await bus.publish(pod("web", namespace="ns", phase="bound", node="n7", decision_id="d-web", **asks))
    await fill(bus, after, "after")


async def fenced_log(bus, before: int) -> None:
    """Leader A (epoch 1) places the pod; B takes epoch 2; A's late decision
    for the pod comes after B's fence and must not count."""
    await bus.publish(PlacementDecisions.of(fence_decision(1, "A")))
    await fill(bus, before, "a", epoch=1, leader="A")
    await bus.publish(PlacementDecisions(items=[decision("x", "d-x", epoch=1, leader="A"),
                                                decision("web", "d-web-A", outcome="placed", node="n1",
                                                         epoch=1, leader="A")]))
    await bus.publish(PlacementDecisions.of(fence_decision(2, "B")))
    await bus.publish(PlacementDecisions(items=[decision("y", "d-y", epoch=2, leader="B"),
                                                decision("web", "d-web-late", epoch=1, leader="A")]))
    await fill(bus, 2, "b", epoch=2, leader="B")


class Delivered:
    """Counts the messages the NATS server hands the reader (each becomes a
    RawMessage in nats_reader), whether or not the reader yields them."""

    def __init__(self, monkeypatch) -> None:
        import tidal_bus.nats_reader as reader

        self.count, self.counting, made = 0, False, reader.raw_message

        def counted(msg):
            self.count += self.counting
            return made(msg)

        monkeypatch.setattr(reader, "raw_message", counted)


async def explained(url: str, namespace: str, build, size: int, delivered: Delivered | None = None):
    """(index lookup, whole-log read, messages delivered to the lookup) of
    ns/web on a log `build` makes."""
    async with make_bus(url, namespace, cluster=CLUSTER) as bus:
        await bus.ensure_streams()
        await build(bus, size)
        await bus.publish(PlacementDecisions.of(decision("web", "d-elsewhere")), cluster="other")
        if delivered is not None:
            delivered.count, delivered.counting = 0, True
        index = await lookup(bus, CLUSTER, "ns", "web")
        sent = delivered.count if delivered is not None else None
        if delivered is not None:
            delivered.counting = False
        return index, await read_whole_log(bus, CLUSTER, "ns", "web"), sent


@pytest.mark.parametrize("build, want", [(pending_log, "d-web-2"), (bound_log, "d-web"), (fenced_log, "d-web-A")],
                         ids=["pending-in-a-batch", "bound-then-others", "fenced"])
def test_explain_reads_as_many_messages_whatever_the_logs_length(nats_server, namespace, build, want, monkeypatch):
    delivered = Delivered(monkeypatch)
    small = asyncio.run(explained(nats_server.url, namespace + "n", build, N, delivered))
    large = asyncio.run(explained(nats_server.url, namespace + "m", build, 10 * N, delivered))
    for index, whole, _ in (small, large):
        assert index.decision is not None and index.decision.decision_id == want and index.complete
        assert whole.decision == index.decision  # the same answer as reading the whole log
    assert small[0].read == large[0].read, (small[0].read, large[0].read)
    # what the server sent the lookup, read or not: as flat (a bounded read asks for no more than it may read)
    assert small[2] == large[2] and small[2] <= small[0].read + 3, (small[2], large[2], small[0].read)
    assert small[0].read < N  # less than the filler alone
    assert large[1].read - small[1].read >= 9 * N  # the whole-log read grows with the log: the count is sensitive


def test_the_pods_own_event_comes_by_its_key(nats_server, namespace):
    async def build(bus, size):
        await bus.publish(pod("web", namespace="ns", phase="pending", tenant="team-a"))
        await pending_log(bus, size)

    index, whole, _ = asyncio.run(explained(nats_server.url, namespace, build, N))
    assert index.pod is not None and index.pod.tenant == "team-a" and whole.pod == index.pod


def test_no_decision_and_the_scan_limit_are_said_in_one_line(nats_server, namespace, capsys):
    async def build() -> None:
        async with make_bus(nats_server.url, namespace, cluster=CLUSTER) as bus:
            await bus.ensure_streams()
            await pending_log(bus, 2 * N)

    asyncio.run(build())
    bus = ["--bus", nats_server.url, "--namespace", namespace, "--cluster", CLUSTER]
    capsys.readouterr()
    assert cli.main(["explain", "ns/nobody", *bus]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no decision for ns/nobody in cluster c1 (" in err
    # the pod's latest decision is the 4th event from the end: a limit of 3 stops short and says so
    assert cli.main(["explain", "ns/web", "--scan-limit", "4", *bus]) == 0
    capsys.readouterr()
    assert cli.main(["explain", "ns/web", "--scan-limit", "3", *bus]) == 1
    assert "in the last 3 decision events (--scan-limit 0: all)" in capsys.readouterr().err
    assert cli.main(["explain", "ns/web", "--scan-limit", "0", *bus]) == 0
    assert "pod ns/web: PENDING  (decision d-web-2" in capsys.readouterr().out


def test_the_command_prints_json_and_yaml_on_either_broker(bus_url, namespace, capsys):
    async def build() -> None:
        async with make_bus(bus_url, namespace, cluster=CLUSTER) as bus:
            await bus.ensure_streams()
            await bound_log(bus, 3, gpu={"count": 1, "models": ["A100"]})

    asyncio.run(build())
    bus = ["--bus", bus_url, "--namespace", namespace, "--cluster", CLUSTER]
    capsys.readouterr()
    assert cli.main(["explain", "ns/web", "-o", "json", *bus]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["cluster"] == CLUSTER and shown["resource_type"] == "A100"
    assert shown["decision"]["decision_id"] == "d-web" and shown["decision"]["node"] == "n7"
    assert shown["decision"]["outcome"] == "placed"
    assert cli.main(["explain", "ns/web", "-o", "yaml", *bus]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == shown
    assert cli.main(["explain", "ns/web", *bus]) == 0
    assert capsys.readouterr().out.startswith("pod ns/web: PLACED on n7  (decision d-web")
