"""On a three-server JetStream cluster: a multi-server bus URL connects
(past a dead seed) and names the server in use; streams and the membership
bucket get three replicas; an operator's R3 stream is never lowered, only
raised where Tidal needs more, and commands that only read change nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from stack_over_bus import start_stack, stop_stack
from tidal_bus import Bus
from tidal_bus.embedded import EmbeddedNatsCluster, free_port
from tidal_bus.membership import Membership
from tidal_bus.nats_streams import reconciled, stream_config
from tidal_bus.subjects import nats_stream_name
from tidal_schemas.streams import STREAMS, stream

CLI = [sys.executable, "-m", "tidal_cli.main"]


@pytest.fixture(scope="module")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory):
    cluster = EmbeddedNatsCluster(tmp_path_factory.mktemp("nats-cluster")).start()
    yield cluster
    cluster.stop()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


async def stream_configs(url: str, namespace: str):
    async with Bus.from_url(url, namespace=namespace, cluster="c", source="test") as bus:
        return {name: (await bus.backend.js.stream_info(nats_stream_name(namespace, stream(name)))).config
                for name in STREAMS}


async def make_streams(url: str, namespace: str, **change) -> None:
    """Every stream of `namespace` as an operator made it: R3 and `change`."""
    async with Bus.from_url(url, namespace=namespace, cluster="c", source="test") as bus:
        for name in STREAMS:
            await bus.backend.js.add_stream(replace(stream_config(namespace, stream(name), 3), **change))


def test_multi_server_url_connects_past_a_dead_seed_and_names_its_server(nats_cluster):
    dead = free_port()
    url = f"nats://127.0.0.1:{dead}," + nats_cluster.url.removeprefix("nats://")

    async def connect():
        async with Bus.from_url(url, namespace="seeds", cluster="c", source="test") as bus:
            return bus.backend.server_in_use, bus.backend.connected
    in_use, connected = run(connect())
    assert connected
    ports = {str(s.port) for s in nats_cluster.servers}
    assert in_use.split(" ")[0].rsplit(":", 1)[1] in ports, in_use
    assert in_use.endswith(")") and "(n" in in_use  # the server's name, as its cluster knows it


def test_streams_and_membership_bucket_get_three_replicas_on_a_cluster(nats_cluster, namespace):
    async def go():
        async with Bus.from_url(nats_cluster.url, namespace=namespace, cluster="c", source="test") as bus:
            await bus.ensure_streams()
            membership = Membership(bus.backend.js, bucket=f"{namespace}_MEMBERS".upper(), group_key="g",
                                    partitions=4, on_change=lambda owned: asyncio.sleep(0),
                                    replicas=bus.backend.stream_replicas())
            await membership._bucket()
            bucket = await bus.backend.js.stream_info(f"KV_{namespace}_MEMBERS".upper())
        return bucket.config.num_replicas
    assert run(go()) == 3
    assert {c.num_replicas for c in run(stream_configs(nats_cluster.url, namespace)).values()} == {3}


def test_an_r3_stream_is_raised_where_tidal_needs_more_and_never_lowered(nats_cluster, namespace):
    run(make_streams(nats_cluster.url, namespace, duplicate_window=60.0, description="ops"))

    async def ensure_with_one_replica():
        async with Bus.from_url(nats_cluster.url, namespace=namespace, cluster="c", source="test",
                                replicas=1) as bus:
            await bus.ensure_streams()
    run(ensure_with_one_replica())
    for config in run(stream_configs(nats_cluster.url, namespace)).values():
        assert config.num_replicas == 3
        assert config.duplicate_window == pytest.approx(120.0)  # raised to what Tidal's dedupe needs
        assert config.description == "ops"  # the operator's own settings carried over


def test_reconciling_keeps_higher_limits_and_refuses_what_cannot_change():
    want = stream_config("ns", stream("node.metrics"), 3)
    have = replace(want, num_replicas=5, max_age=want.max_age * 2, max_bytes=-1, duplicate_window=600.0)
    assert reconciled(have, want)[1] == []
    lower = replace(want, num_replicas=1, max_age=want.max_age / 2)
    update, changes = reconciled(lower, want)
    assert update.num_replicas == 3 and update.max_age == want.max_age and len(changes) == 2
    from nats.js.api import StorageType
    from tidal_bus.errors import BusConfigError
    with pytest.raises(BusConfigError, match="storage memory, Tidal needs file"):
        reconciled(replace(want, storage=StorageType.MEMORY), want)


def test_commands_that_only_read_change_no_stream(nats_cluster, namespace, tmp_path):
    run(make_streams(nats_cluster.url, namespace, duplicate_window=60.0))
    env = {**os.environ, "TIDAL_BUS_URL": nats_cluster.url, "TIDAL_NAMESPACE": namespace}
    for argv in (["audit"], ["events", "tail", "dead.letter", "--no-follow"], ["explain", "default/nobody"]):
        subprocess.run(CLI + argv, env=env, capture_output=True, text=True, timeout=120)
    for config in run(stream_configs(nats_cluster.url, namespace)).values():
        assert (config.num_replicas, config.duplicate_window) == (3, pytest.approx(60.0))


def test_a_read_only_command_on_a_namespace_never_started_says_so(nats_cluster, namespace):
    env = {**os.environ, "TIDAL_BUS_URL": nats_cluster.url, "TIDAL_NAMESPACE": namespace}
    done = subprocess.run(CLI + ["events", "tail", "dead.letter", "--no-follow"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "does not exist: no Tidal service has run in namespace" in done.stderr
    assert "Traceback" not in done.stderr


def test_tidal_up_starts_on_a_cluster_and_never_lowers_an_r3_stream(nats_cluster, namespace, tmp_path):
    run(make_streams(nats_cluster.url, namespace, duplicate_window=60.0))
    up, _ = start_stack(nats_cluster.url, namespace, tmp_path / "up", services="scoring")
    stop_stack(up)
    for config in run(stream_configs(nats_cluster.url, namespace)).values():
        assert config.num_replicas == 3 and config.duplicate_window == pytest.approx(120.0)
