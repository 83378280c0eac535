"""Least-privilege NATS users for a Tidal deployment: who may publish and
consume what. Each user's JWT carries its permissions (nats_identity), so
the server's configuration lists no user.

`ACCESS` is the explicit table of each service's streams: what it publishes,
which consumer groups it runs (stream, group), and which streams it reads
whole without a group. From it, each user gets

- publish on `{ns}.{stream}.{cluster}.*.*` for the streams it produces (and
  `….*.*.{lane}` for a stream's side lane), and the node agent of node X
  only `{ns}.{stream}.{cluster}.{partition(X)}.{X}`;
- dead letters of its own cluster;
- the JetStream API calls it makes, named per stream (`STREAM.INFO`/`CREATE`
  of the namespace's streams, never `UPDATE`/`DELETE`/`PURGE`) and, for its
  consumer groups, per durable consumer (`CONSUMER.DURABLE.CREATE`, `INFO`,
  `MSG.NEXT`, `$JS.ACK`);
- group heartbeats in the membership bucket under its own groups' keys only;
- subscribe on its own reply prefix `_INBOX_<user>.>` and nothing else
  (JetStream delivers to that inbox).

Reading a stream without a group uses ephemeral consumers, whose names the
server picks: those rights are per stream, not per consumer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tidal_schemas.streams import STREAMS, partition_for, stream

from .auth import inbox_prefix_for
from .subjects import encode_durable, encode_token, nats_consumer_name, nats_stream_name


@dataclass(frozen=True)
class Access:
    """What one service does on the bus. Groups may use `{cluster}`, `{node}`,
    or `*` for a group name made at run time."""

    publishes: tuple[str, ...]
    consumes: tuple[tuple[str, str], ...] = ()
    reads: tuple[str, ...] = ()


_GROUP = "{service}-{cluster}"  # Service.default_group() for one cluster

ACCESS: dict[str, Access] = {
    "topology": Access(
        publishes=("node.topology", "node.metrics", "action.result", "cpu.assignment"),
        consumes=(("placement.decision", "topology-{node}"), ("node.action", "topology-{node}")),
        reads=("pod.lifecycle", "bind.result")),
    "scoring": Access(
        publishes=("score.node", "score.user"),
        consumes=(("node.metrics", _GROUP), ("score.user", _GROUP)),
        reads=("pod.lifecycle",)),
    "placement": Access(
        publishes=("placement.decision", "stage.journal", "tenant.usage"),
        consumes=(("tenant.config", _GROUP + "-leader"),),
        reads=("node.topology", "node.allocatable", "node.status", "score.node", "score.user", "tenant.config",
               "node.action", "pod.lifecycle", "bind.result", "placement.decision", "cpu.assignment")),
    "oversell": Access(
        publishes=("node.allocatable", "node.action", "stage.journal"),
        consumes=(("node.topology", _GROUP), ("score.node", _GROUP), ("node.metrics", _GROUP)),
        reads=("pod.lifecycle", "node.action", "action.result")),
    "remediation": Access(
        publishes=("node.action", "action.result", "stage.journal"),  # results: actions it gives up on
        consumes=(("node.topology", _GROUP), ("node.metrics", _GROUP)),
        reads=("node.action", "action.result", "cpu.assignment")),
    "bridge": Access(
        publishes=("pod.lifecycle", "bind.result", "action.result", "tenant.config", "node.status"),
        consumes=(("placement.decision", _GROUP), ("node.action", _GROUP),
                  ("node.action", _GROUP + "-evictions"), ("tenant.usage", _GROUP), ("score.user", _GROUP)),
        reads=("tenant.config",)),
    "simulator": Access(
        publishes=("node.topology", "node.metrics", "pod.lifecycle", "bind.result", "action.result"),
        consumes=(("placement.decision", "simulator-*"), ("node.allocatable", "simulator-*"),
                  ("node.action", "simulator-*")),
        reads=("score.user", "placement.decision")),
    "webhook": Access(publishes=(), reads=("node.allocatable",)),  # every replica reads every node's figure
}

ADMIN = "admin"
CENTRAL = tuple(name for name in ACCESS if name != "topology")


def members_bucket(namespace: str) -> str:
    """The KV bucket of consumer-group heartbeats (see membership.py)."""
    return f"{namespace}_members".upper().replace("-", "_")


def topology_user(node: str) -> str:
    return f"topology-{node}"


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def service_permissions(service: str, *, namespace: str, cluster: str, node: str | None = None) -> Permissions:
    """The subjects user `service` (the node agent of `node` for topology)
    may publish to and subscribe to."""
    access = ACCESS[service]
    if service == "topology" and not node:
        raise ValueError("the node agent's permissions are per node: give the node")
    user = topology_user(node) if service == "topology" and node else service
    c = encode_token(cluster)
    publish: list[str] = []
    for name in access.publishes:
        spec = stream(name)
        if service == "topology":  # its own node's key only, hence one partition
            publish.append(f"{namespace}.{spec.token}.{c}.{partition_for(node, spec.partitions)}.{encode_token(node)}")
        else:
            publish.append(f"{namespace}.{spec.token}.{c}.*.*")
            if spec.side_lane is not None:
                publish.append(f"{namespace}.{spec.token}.{c}.*.*.{spec.side_lane}")
    publish.append(f"{namespace}.{stream('dead.letter').token}.{c}.*.*")

    api = "$JS.API"
    bucket = members_bucket(namespace)
    kv_stream = f"KV_{bucket}"
    publish += _stream_rights(namespace, service)
    for name, group_pattern in access.consumes:
        spec = stream(name)
        s = nats_stream_name(namespace, spec)
        group = group_pattern.format(service=service, cluster=cluster, node=node)
        for partition in range(spec.partitions):
            durable = "*" if "*" in group else nats_consumer_name(group, spec, partition)
            # `CONSUMER.CREATE.<stream>.<name>.<filter>`: the durable's own name, any filter
            publish += [f"{api}.CONSUMER.CREATE.{s}.{durable}.>", f"{api}.CONSUMER.INFO.{s}.{durable}",
                        f"{api}.CONSUMER.MSG.NEXT.{s}.{durable}", f"$JS.ACK.{s}.{durable}.>"]
        # heartbeats under the group's own keys only
        publish.append(f"$KV.{bucket}.{spec.token}.{'*' if '*' in group else encode_durable(group)}.*")
    if access.consumes:  # the heartbeat watcher, an ordered consumer (nats-py names none, so no filter)
        publish += [f"{api}.CONSUMER.CREATE.{kv_stream}", f"{api}.CONSUMER.INFO.{kv_stream}.*",
                    f"$JS.FC.{kv_stream}.>"]
    return Permissions(publish=tuple(dict.fromkeys(publish)), subscribe=(f"{inbox_prefix_for(user)}.>",))


@functools.lru_cache(maxsize=64)
def _stream_rights(namespace: str, service: str) -> tuple[str, ...]:
    """The JetStream API calls of `service` that are the same on every node
    (computed once, not 20,000 times): stream info/create, and its ephemeral
    readers, whose consumer names the server picks."""
    api = "$JS.API"
    names = [nats_stream_name(namespace, spec) for spec in STREAMS.values()] + [f"KV_{members_bucket(namespace)}"]
    # `INFO` (the account's): how /readyz tells a cluster that has lost its quorum
    rights = [f"{api}.INFO"] + [f"{api}.STREAM.{verb}.{name}" for name in names for verb in ("INFO", "CREATE")]
    access = ACCESS[service]
    for name in dict.fromkeys([*access.reads, *(name for name, _ in access.consumes)]):
        s = nats_stream_name(namespace, stream(name))
        # a server-made name, then the filter subject(s) when there is one
        rights += [f"{api}.CONSUMER.CREATE.{s}.*", f"{api}.CONSUMER.CREATE.{s}.*.>",
                   f"{api}.CONSUMER.INFO.{s}.*", f"{api}.CONSUMER.MSG.NEXT.{s}.*"]
    return tuple(rights)


def admin_permissions(namespace: str) -> Permissions:
    """The operator (the `tidal` CLI): everything in the namespace, and the
    whole JetStream API (stream updates and deletes are its job)."""
    return Permissions(publish=(f"{namespace}.>", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>"),
                       subscribe=(f"{inbox_prefix_for(ADMIN)}.>",))


def users(namespace: str, cluster: str, nodes: list[str]) -> dict[str, Permissions]:
    """Every user of a deployment: one per central service, one per node
    agent listed (on Kubernetes none: the credential issuer grants each
    node agent its user at run time, node_issuer), and the admin."""
    found = {name: service_permissions(name, namespace=namespace, cluster=cluster) for name in CENTRAL}
    for node in nodes:
        found[topology_user(node)] = service_permissions("topology", namespace=namespace, cluster=cluster, node=node)
    found[ADMIN] = admin_permissions(namespace)
    return found
