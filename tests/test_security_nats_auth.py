"""The deployable NATS configuration over a real nats-server: the config
`tidal nats-config` generates (operator mode: a user JWT per service and
per node agent carrying its permissions, signed by the account) refuses
what a service is not permitted, refuses anonymous clients, bare keys and
JWTs another account signed, admits a node minted later without a reload,
and still lets the real services run the pipeline. The server's own log is checked for any refusal
the pipeline hit."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
from pydantic import SecretStr

from builders import metrics, pod, figures_in
from conftest import NATS_TEST_OPTIONS, start_service, stop_service, wait_until
from tidal_bus import Bus, BusConfigError, StartAt
from tidal_bus.auth import BusAuth, BusPermissionError
from tidal_bus.embedded import EmbeddedNats
from tidal_bus.nats_identity import mint
from tidal_bus.nats_permissions import service_permissions
from tidal_bus.nkey import new_key, new_user_seed
from tidal_cli.main import main as tidal
from tidal_oversell.service import OversellService
from tidal_oversell.settings import OversellSettings
from tidal_placement.service import PlacementService
from tidal_placement.settings import PlacementSettings
from tidal_remediation.service import RemediationService
from tidal_remediation.settings import RemediationSettings
from tidal_schemas import ActionResult, PlacementDecision, PlacementDecisions
from tidal_scoring.service import ScoringService
from tidal_scoring.settings import ScoringSettings
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

CLUSTER = "c1"
NODES = ["node-a", "node-b"]


class SecureNats:
    """A nats-server run with `tidal nats-config` output, and a Bus per user
    logged in with the user's `.creds` file (or with a bare nkey `seed`, or
    another `creds_file`)."""

    def __init__(self, server: EmbeddedNats, namespace: str, credentials, config) -> None:
        self.server, self.namespace, self.credentials, self.config = server, namespace, credentials, config

    def bus(self, user: str | None, seed: str | None = None, creds_file=None, **options) -> Bus:
        if seed is not None:
            auth = BusAuth(user=user, nkey_seed=SecretStr(seed))
        elif creds_file is not None:
            auth = BusAuth(creds_file=creds_file)
        else:
            auth = BusAuth(creds_file=self.credentials / f"{user}.creds") if user else BusAuth()
        return Bus.from_url(self.server.url, namespace=self.namespace, cluster=CLUSTER, source=user or "anonymous",
                            auth=auth, **{**NATS_TEST_OPTIONS, "connect_deadline_s": 10.0, **options})

    def violations(self, since: int = 0) -> list[str]:
        """Permission refusals the server logged (after byte `since` of its log)."""
        text = self.server.log_path.read_bytes()[since:].decode(errors="replace")
        return [line for line in text.splitlines() if "Violation" in line]

    def log_size(self) -> int:
        return self.server.log_path.stat().st_size


@pytest.fixture(scope="module")
def secure_nats(tmp_path_factory):
    namespace = "s" + uuid.uuid4().hex[:10]
    directory = tmp_path_factory.mktemp("secure-nats")
    config, credentials = directory / "nats.conf", directory / "creds"
    assert tidal(["nats-config", "--namespace", namespace, "--cluster", CLUSTER, "--nodes", ",".join(NODES),
                  "--out", str(config), "--credentials-dir", str(credentials), "--store-dir", ""]) == 0
    server = EmbeddedNats(directory / "server", config_file=config).start()
    yield SecureNats(server, namespace, credentials, config)
    server.stop()


@pytest.fixture(scope="module")
async def admin_streams(secure_nats):
    """The admin creates every stream once, as an operator would."""
    async with secure_nats.bus("admin") as bus:
        await bus.ensure_streams()
    return secure_nats


async def test_node_agent_publishes_only_its_own_node(admin_streams):
    async with admin_streams.bus("topology-node-a", publish_timeout_s=10.0) as bus:
        await bus.publish(metrics("node-a"))  # its own node: accepted
        with pytest.raises(BusPermissionError) as refused:
            await bus.publish(metrics("node-b"))
    message = str(refused.value)
    assert "publish to" in message and ".node_metrics.c1." in message and "node-b" in message
    assert "topology-node-a" in message and not refused.value.retriable
    async with admin_streams.bus("admin") as admin:
        keys = [raw.key async for raw, _ in admin.read("node.metrics", StartAt.earliest())]
    assert keys == ["node-a"]


async def test_a_service_cannot_publish_another_services_stream(admin_streams):
    async with admin_streams.bus("scoring", publish_timeout_s=10.0) as bus:
        with pytest.raises(BusPermissionError, match="placement_decision"):
            await bus.publish(PlacementDecisions.of(PlacementDecision(
                decision_id="forged", namespace="default", name="p", outcome="placed", node="node-a")))
    async with admin_streams.bus("topology-node-b", publish_timeout_s=10.0) as bus:
        with pytest.raises(BusPermissionError, match="pod_lifecycle"):
            await bus.publish(pod("forged", phase="running", node="node-b"))


async def test_anonymous_bare_keys_and_foreign_jwts_are_refused_at_once(admin_streams, tmp_path):
    """No credentials, a bare key (even node-a's own seed, without its JWT),
    and a JWT granting node-b's subjects but signed by another account's
    key (another deployment's, or a forger's) are all refused at connect."""
    stranger = new_user_seed()
    own_seed = (admin_streams.credentials / "topology-node-a.nk").read_text().strip()
    foreign_signer, foreign_account = new_key("account")
    forged = mint(foreign_signer, foreign_account, "topology-node-b",
                  service_permissions("topology", namespace=admin_streams.namespace, cluster=CLUSTER, node="node-b"),
                  iat=int(time.time()))
    forged_file = tmp_path / "forged.creds"
    forged_file.write_text(forged.text())
    for bus in (admin_streams.bus(None), admin_streams.bus("scoring", seed=stranger),
                admin_streams.bus("topology-node-a", seed=own_seed), admin_streams.bus(None, creds_file=forged_file)):
        with pytest.raises(BusConfigError, match="(?i)authorization violation") as refused:
            await bus.__aenter__()
        assert stranger not in str(refused.value) and forged.seed not in str(refused.value)


async def test_a_node_minted_later_joins_without_a_reload(admin_streams, tmp_path, monkeypatch, capsys):
    """`tidal nats-creds` with the account signing key alone admits node-c:
    the server's config is untouched and not reloaded, node-c publishes its
    own node's events (its creds given as TIDAL_BUS_CREDS_FILE) and is
    refused node-b's."""
    config = admin_streams.config.read_text()
    creds_file = tmp_path / "node-c.creds"
    signing, account = (admin_streams.credentials / "account-signing.nk"), \
        (admin_streams.credentials / "account.pub").read_text().strip()
    assert tidal(["nats-creds", "--namespace", admin_streams.namespace, "--cluster", CLUSTER, "--node", "node-c",
                  "--signing-key", str(signing), "--account", account, "--out", str(creds_file)]) == 0
    assert "topology-node-c" in capsys.readouterr().out
    monkeypatch.setenv("TIDAL_BUS_CREDS_FILE", str(creds_file))
    bus = Bus.from_url(admin_streams.server.url, namespace=admin_streams.namespace, cluster=CLUSTER,
                       source="topology-node-c", auth=BusAuth.from_env(),
                       **{**NATS_TEST_OPTIONS, "connect_deadline_s": 10.0, "publish_timeout_s": 10.0})
    async with bus:
        await bus.publish(result("node-c"))
        with pytest.raises(BusPermissionError, match="action_result.*node-b"):
            await bus.publish(result("node-b"))
    assert admin_streams.config.read_text() == config


def result(node: str) -> ActionResult:
    return ActionResult(action_id=f"act-{node}", node=node, kind="freeze", pod="default/p", status="done")


async def test_a_node_agent_cannot_take_over_another_agents_consumers(admin_streams):
    """Consumer groups are per user: node-b's agent cannot join node-a's group."""
    async with admin_streams.bus("topology-node-b") as bus:
        async def ignore(envelope, delivery):
            return None

        consumer = bus.consumer("node.action", "topology-node-a", ignore)
        refused = r"(?i)publish to \$kv\.\w+_members\.node_action\.topology-node-a\."
        with pytest.raises(BusPermissionError, match=refused):
            await consumer.run()


def _common(secure: SecureNats) -> dict:
    return dict(bus_url=secure.server.url, namespace=secure.namespace, cluster=CLUSTER, http_port=0,
                http_host="127.0.0.1")


async def test_the_pipeline_runs_with_the_permitted_users(admin_streams, tmp_path):
    """The real node agent (as node-a), scoring, placement, oversell and
    remediation, each logged in as its own user: metrics become scores, a
    pending pod published by the bridge's user is placed on node-a, and the
    server refuses nothing along the way."""
    secure = admin_streams
    since = secure.log_size()
    common = _common(secure)
    services = [
        (TopologyService, TopologySettings(**common, node_name="node-a", numa_override="0:0,1:1", interval_s=0.3,
                                           state_file=str(tmp_path / "cpu.json"), cgroup_parent="tidal-none"),
         "topology-node-a"),
        (ScoringService, ScoringSettings(**common, period_s=0.2, settle_time="4s", peak_min_samples=3), "scoring"),
        (PlacementService, PlacementSettings(**common, gpu_strategy="best-fit", takeover_settle_s=0.5), "placement"),
        (OversellService, OversellSettings(**common), "oversell"),
        (RemediationService, RemediationSettings(**common), "remediation"),
    ]
    running = []
    try:
        for service_class, settings, user in services:
            bus = secure.bus(user)
            await bus.__aenter__()
            service = service_class(settings, bus=bus)
            running.append((service, await start_service(service, timeout=30), bus))
        scoring = running[1][0]
        placement = running[2][0]
        await wait_until(lambda: scoring.metrics.events_out.labels("scoring", "score.node")._value.get() >= 1,
                         timeout=20, what="a node score from the agent's metrics")
        async with secure.bus("bridge") as bridge:
            await bridge.publish(pod("web", cpu_milli=500))
        await wait_until(lambda: placement.decisions >= 1, timeout=30, what="a placement decision")
        async with secure.bus("admin") as admin:
            decisions = [d async for _, e in admin.read("placement.decision", StartAt.earliest())
                         for d in e.payload.items if d.outcome == "placed"]
            scores = figures_in([e async for _, e in admin.read("score.node", StartAt.earliest())])
        assert [(d.name, d.node) for d in decisions] == [("web", "node-a")]
        assert {s.node for s in scores} == {"node-a"}
    finally:
        for service, task, bus in reversed(running):
            await stop_service(service, task)
            await bus.__aexit__(None, None, None)
    assert secure.violations(since) == []


async def test_a_node_that_leaves_is_refused_after_the_reload(tmp_path):
    """The node list loses node-b: its JWT is revoked in the account JWT,
    and once the server reloads the config, node-b's creds are refused
    while node-a's still log in."""
    namespace = "r" + uuid.uuid4().hex[:10]
    config, credentials = tmp_path / "nats.conf", tmp_path / "creds"
    argv = ["nats-config", "--namespace", namespace, "--cluster", CLUSTER, "--out", str(config),
            "--credentials-dir", str(credentials), "--store-dir", ""]
    assert tidal([*argv, "--nodes", "node-a,node-b"]) == 0
    server = EmbeddedNats(tmp_path / "server", config_file=config).start()
    secure = SecureNats(server, namespace, credentials, config)
    try:
        async with secure.bus("topology-node-b"):
            pass
        assert tidal([*argv, "--nodes", "node-a"]) == 0
        since = secure.log_size()
        os.kill(server.pid, signal.SIGHUP)  # nats-server --signal reload
        await wait_until(lambda: b"Reloaded server configuration" in server.log_path.read_bytes()[since:],
                         timeout=10, what="the server's reload")
        with pytest.raises(BusConfigError, match="(?i)authorization violation"):
            await secure.bus("topology-node-b").__aenter__()
        async with secure.bus("topology-node-a"):
            pass
    finally:
        server.stop()


@pytest.mark.parametrize("argv, fragment", [
    (["--account", "not-a-key"], "--account"),
    (["--signing-key", "{tmp}/missing.nk"], "--signing-key"),
    (["--signing-key", "{user_seed}"], "not an nkey account seed"),  # a user's seed cannot sign users
    (["--node", "Node_B"], "is not a node name"),
])
def test_nats_creds_refuses_bad_input_in_one_line(tmp_path, capsys, argv, fragment):
    signing, account = new_key("account")
    (tmp_path / "signing.nk").write_text(signing + "\n")
    (tmp_path / "user.nk").write_text(new_user_seed() + "\n")
    given = {"--cluster": CLUSTER, "--node": "node-b", "--signing-key": str(tmp_path / "signing.nk"),
             "--account": account, "--out": str(tmp_path / "out.creds")}
    replacements = {"{tmp}": str(tmp_path), "{user_seed}": str(tmp_path / "user.nk")}
    for key, value in zip(argv[::2], argv[1::2]):
        for old, new in replacements.items():
            value = value.replace(old, new)
        given[key] = value
    assert tidal(["nats-creds", *[x for pair in given.items() for x in pair]]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and signing not in err
    assert not (tmp_path / "out.creds").exists()
