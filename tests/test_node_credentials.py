"""Node agents' NATS credentials issued at run time from their ServiceAccount
token (issue 55 item 3, issue 52 item 5): nothing per node in any Secret.

A real nats-server runs the operator-mode config `tidal nats-config` writes
with no node listed; the stand-in API server mints pod-bound tokens and
reviews them as kube-apiserver does; the issuer (`tidal_credentials`) is
served over real HTTP. A token bound to node-a's pod gets node-a's
permissions and nothing else; anything else is refused with its reason.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
import uuid

import orjson
import pytest

from builders import metrics
from conftest import NATS_TEST_OPTIONS, start_service, stop_service, wait_until
from tidal_bus import Bus, StartAt
from tidal_bus.auth import BusAuth, BusPermissionError
from tidal_bus.embedded import EmbeddedNats
from tidal_bus.nats_jwt import decode_claims, parse_creds
from tidal_bus.nats_permissions import service_permissions
from tidal_bus.nkey import new_key, new_user_key
from tidal_bus.node_issuer import bearer_token, expiry, judge, renew_at
from tidal_bus.node_login import LoginError, NodeLogin
from tidal_cli.main import main as tidal
from tidal_cli.webhook_tls import make_webhook_tls
from tidal_clock import wall_clock
from tidal_credentials.service import CredentialIssuer
from tidal_credentials.settings import CredentialsSettings
from tidal_simulator.kube_api import KubeApiServer
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

# the agents run in their own namespace (k8s/base/node/), the other services in tidal-system
CLUSTER, AGENTS, SYSTEM, AUDIENCE, TTL = "c1", "tidal-node", "tidal-system", "tidal-bus", 600


class Clock:
    """A clock the test moves; it starts at the wall time because nats-server
    checks a JWT's expiry against its own."""

    def __init__(self) -> None:
        self.t = wall_clock()

    def __call__(self) -> float:
        return self.t


class World:
    def __init__(self, tmp, server, api, issuer, namespace, credentials, clock) -> None:
        self.tmp, self.server, self.api, self.issuer = tmp, server, api, issuer
        self.namespace, self.credentials, self.clock = namespace, credentials, clock

    def token_file(self, token: str):
        path = self.tmp / f"token-{uuid.uuid4().hex[:8]}"
        path.write_text(token + "\n")
        return path

    def login(self, token: str, **options) -> NodeLogin:
        return NodeLogin(self.issuer.url, self.token_file(token), self.tmp / f"{uuid.uuid4().hex[:8]}.creds",
                         clock=self.clock, **options)

    def bus(self, creds_file, **options) -> Bus:
        return Bus.from_url(self.server.url, namespace=self.namespace, cluster=CLUSTER, source="topology",
                            auth=BusAuth(creds_file=creds_file),
                            **{**NATS_TEST_OPTIONS, "connect_deadline_s": 10.0, "publish_timeout_s": 10.0,
                               **options})

    def agent_token(self, pod: str, audiences=(AUDIENCE,), service_account: str = "tidal-topology",
                    namespace: str = AGENTS) -> str:
        return self.api.mint_token(namespace, service_account, pod=pod, audiences=audiences)


def agent_pod(api: KubeApiServer, name: str, node: str | None) -> None:
    """A node agent's pod, running as its ServiceAccount."""
    api.add_pod(name, AGENTS, node=node, spec={"serviceAccountName": "tidal-topology"})


def issuer_settings(tmp, namespace, credentials, api, **options) -> CredentialsSettings:
    return CredentialsSettings(**{
        "namespace": namespace, "cluster": CLUSTER, "http_host": "127.0.0.1", "http_port": 0,
        "signing_key_file": credentials / "account-signing.nk", "account_file": credentials / "account.pub",
        "kube_api_url": api.url, "kube_token_file": tmp / "issuer-token", "kube_ca_file": None,
        "agent_service_account": f"{AGENTS}:tidal-topology", "ttl_s": TTL, **options})


@pytest.fixture(scope="module")
async def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("node-credentials")
    namespace = "n" + uuid.uuid4().hex[:10]
    config, credentials = tmp / "nats.conf", tmp / "creds"
    assert tidal(["nats-config", "--namespace", namespace, "--cluster", CLUSTER, "--out", str(config),
                  "--credentials-dir", str(credentials), "--store-dir", ""]) == 0
    assert not list(credentials.glob("topology-*")), "no node agent is listed anywhere"
    server = EmbeddedNats(tmp / "server", config_file=config).start()
    api = await KubeApiServer().start()
    for node in ("node-a", "node-b"):
        api.add_node(node)
    agent_pod(api, "agent-a", "node-a")
    api.add_pod("scoring-b", SYSTEM, node="node-b", spec={"serviceAccountName": "tidal-scoring"})
    agent_pod(api, "unbound", None)  # not scheduled: its token names no node
    (tmp / "issuer-token").write_text("the issuer's own token\n")
    clock = Clock()
    issuer = await CredentialIssuer(issuer_settings(tmp, namespace, credentials, api), clock=clock).start()
    async with Bus.from_url(server.url, namespace=namespace, cluster=CLUSTER, source="admin",
                            auth=BusAuth(creds_file=credentials / "admin.creds"), **NATS_TEST_OPTIONS) as admin:
        await admin.ensure_streams()
    try:
        yield World(tmp, server, api, issuer, namespace, credentials, clock)
    finally:
        await issuer.stop()
        await api.stop()
        server.stop()


async def test_a_node_agent_gets_its_own_nodes_permissions_and_publishes_them(world):
    login = world.login(world.agent_token("agent-a"))
    creds = await login.obtain()
    claims = decode_claims(creds.jwt)
    assert claims["name"] == "topology-node-a" and claims["sub"] == login.public_key
    assert claims["exp"] == int(world.clock()) + TTL  # bounded
    granted = service_permissions("topology", namespace=world.namespace, cluster=CLUSTER, node="node-a")
    assert (tuple(claims["nats"]["pub"]["allow"]), tuple(claims["nats"]["sub"]["allow"])) == \
        (granted.publish, granted.subscribe)  # what `tidal nats-config` granted node-a's user
    assert parse_creds(login.creds_file.read_text()).seed == login.seed  # the seed only in the agent's file
    assert login.creds_file.stat().st_mode & 0o077 == 0
    async with world.bus(login.creds_file) as bus:
        await bus.publish(metrics("node-a"))
        with pytest.raises(BusPermissionError) as refused:  # node-a's token never gets node-b's subjects
            await bus.publish(metrics("node-b"))
    assert "node-b" in str(refused.value) and "topology-node-a" in str(refused.value)


def _ask(url: str, token: str | None, public: object) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=orjson.dumps({"publicKey": public}), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())["reason"]


@pytest.mark.parametrize("token, public, code, reason", [
    (None, "agent", 401, "no ServiceAccount token"),
    ("sim.not-a-token-it-minted", "agent", 401, "invalid bearer token"),
    ("agent-a for the API server", "agent", 401, "invalid for the target audiences"),
    ("scoring's token on node-b", "agent", 403, "system:serviceaccount:tidal-system:tidal-scoring is not the node"),
    ("agent, unscheduled pod", "agent", 403, "bound to no node"),
    ("agent-a", "SUAKEYTHATISNOTAPUBLICKEY", 400, "publicKey"),
], ids=["no-token", "unknown", "other-audience", "other-service-account", "no-node", "bad-key"])
async def test_what_is_not_node_agent_on_one_node_is_refused_with_its_reason(world, token, public, code, reason):
    tokens = {"agent-a": world.agent_token("agent-a"),
              "agent-a for the API server": world.agent_token("agent-a", audiences=("https://kubernetes.default.svc",)),
              "scoring's token on node-b": world.agent_token("scoring-b", service_account="tidal-scoring", namespace=SYSTEM),
              "agent, unscheduled pod": world.agent_token("unbound")}
    public = new_user_key()[1] if public == "agent" else public
    answered = await asyncio.to_thread(_ask, world.issuer.url, tokens.get(token, token), public)
    assert answered[0] == code and reason in answered[1]


async def test_without_a_review_the_agent_is_told_to_come_back_and_the_answers_are_counted(world):
    """An issuer the API server treats as anonymous (no token of its own) gets
    403 from it: the agent is answered 503, which it retries."""
    (world.tmp / "empty-token").write_text("")
    settings = issuer_settings(world.tmp, world.namespace, world.credentials, world.api,
                               kube_token_file=world.tmp / "empty-token")
    async with CredentialIssuer(settings) as issuer:
        login = NodeLogin(issuer.url, world.token_file(world.agent_token("agent-a")), world.tmp / "never.creds")
        with pytest.raises(LoginError) as unavailable:
            await login.obtain()
        assert unavailable.value.code == 503 and unavailable.value.retriable
        assert 'User "system:anonymous" cannot create resource "tokenreviews"' in str(unavailable.value)
        scraped = await asyncio.to_thread(lambda: urllib.request.urlopen(issuer.url.replace(
            "/v1/node-credentials", "/metrics"), timeout=10).read().decode())
    assert 'tidal_credentials_requests_total{code="503"} 1.0' in scraped


async def test_a_token_of_a_deleted_pod_is_refused_and_the_refusal_is_not_retried(world):
    agent_pod(world.api, "gone", "node-b")
    login = world.login(world.agent_token("gone"))
    world.api.delete_pod(AGENTS, "gone")
    with pytest.raises(LoginError) as refused:
        await login.obtain_retrying(retry_s=0.01)
    assert refused.value.code == 401 and not refused.value.retriable and "not found" in str(refused.value)


async def test_credentials_are_renewed_before_they_expire_and_the_agent_logs_in_again(world):
    """Time from the injected clock: nothing is renewed before 2/3 of the
    life (400 of 600 s), then a new JWT is written and the connection logs
    in again with it; a renewal refused after expiry is an error."""
    agent_pod(world.api, "renewing", "node-b")
    login = world.login(world.agent_token("renewing"))
    await login.obtain()
    first = decode_claims(parse_creds(login.creds_file.read_text()).jwt)
    reconnects = []
    async with world.bus(login.creds_file) as bus:
        async def reconnect() -> None:
            reconnects.append(world.clock())
            await bus.backend.reconnect()

        world.clock.t += TTL * 2 / 3 - 1
        assert not await login.renew_if_due(reconnect) and not reconnects
        world.clock.t += 2
        assert await login.renew_if_due(reconnect) and len(reconnects) == 1
        renewed = decode_claims(parse_creds(login.creds_file.read_text()).jwt)
        assert renewed["exp"] - first["exp"] == int(TTL * 2 / 3) + 1 and renewed["sub"] == first["sub"]
        await wait_until(lambda: bus.backend._nc.stats["reconnects"] == 1 and bus.backend.connected,
                         what="logged in again")
        await bus.publish(metrics("node-b"))  # with the renewed JWT
        world.api.delete_pod(AGENTS, "renewing")  # its token no longer reviews
        world.clock.t += TTL * 2 / 3 + 1
        assert not await login.renew_if_due(reconnect)  # refused, but the current JWT still holds
        world.clock.t += TTL
        with pytest.raises(LoginError, match="expired and could not be renewed"):
            await login.renew_if_due(reconnect)
    world.clock.t = wall_clock()


async def test_a_pod_bound_token_is_only_for_the_pods_own_service_account(world):
    with pytest.raises(ValueError, match="different serviceaccount"):
        world.api.mint_token(SYSTEM, "tidal-topology", pod="scoring-b")


async def test_the_node_agent_logs_in_with_issued_credentials_over_https_and_publishes_its_node(world):
    """The agent itself, as the DaemonSet runs it: no creds file given, its
    token and the issuer's CA mounted; the issuer served over TLS."""
    tls = make_webhook_tls(["localhost"], ["127.0.0.1"])
    cert, key, ca = tls.write(world.tmp / "issuer-tls")
    settings = issuer_settings(world.tmp, world.namespace, world.credentials, world.api, tls_cert_file=cert,
                               tls_key_file=key)
    async with CredentialIssuer(settings) as issuer:
        assert issuer.url.startswith("https://127.0.0.1:")
        agent = TopologyService(TopologySettings(
            bus_url=world.server.url, namespace=world.namespace, cluster=CLUSTER, http_port=0, http_host="127.0.0.1",
            node_name="node-a", numa_override="0:0,1:1", interval_s=0.3, cgroup_parent="tidal-none",
            state_file=str(world.tmp / "cpu-state.json"), credentials_url=issuer.url, credentials_ca_file=str(ca),
            credentials_token_file=str(world.token_file(world.agent_token("agent-a"))),
            credentials_file=str(world.tmp / "agent" / "creds")))
        task = await start_service(agent)
        try:
            assert agent.login is not None and agent.login.user == "topology-node-a"
            async with world.bus(world.credentials / "admin.creds") as admin:
                async def first_topology():
                    async for _, event in admin.read("node.topology", StartAt.earliest(), follow=True):
                        if event.payload.node == "node-a":
                            return event
                assert (await asyncio.wait_for(first_topology(), 20)).key == "node-a"
        finally:
            await stop_service(agent, task)


# -- the policy alone (tidal_bus.node_issuer), table-driven ------------------------------------------------------

AGENT = "system:serviceaccount:tidal-node:tidal-topology"


def review(authenticated=True, username=AGENT, nodes=("node-a",), audiences=(AUDIENCE,), error=None) -> dict:
    extra = {"authentication.kubernetes.io/pod-name": ["agent-a"]}
    if nodes is not None:
        extra["authentication.kubernetes.io/node-name"] = list(nodes)
    status = {"authenticated": authenticated, "user": {"username": username, "extra": extra}}
    if audiences is not None:
        status["audiences"] = list(audiences)
    return {"status": {**status, **({"error": error} if error else {})}}


@pytest.mark.parametrize("given, code, node", [
    (review(), 200, "node-a"),
    (review(audiences=None), 200, "node-a"),  # an API server that does not echo audiences
    (review(authenticated=False, error="token expired"), 401, None),
    ({"status": {}}, 401, None),
    ({}, 401, None),
    (review(audiences=("https://kubernetes.default.svc",)), 401, None),
    (review(username="system:serviceaccount:tidal-system:default"), 403, None),
    # the agent's ServiceAccount name in the control plane's namespace: not the agents'
    (review(username="system:serviceaccount:tidal-system:tidal-topology"), 403, None),
    (review(username="system:node:node-a"), 403, None),  # a kubelet's own credential is not the agent's
    (review(nodes=None), 403, None),  # before Kubernetes 1.30, or a token bound to no pod
    (review(nodes=()), 403, None),
    (review(nodes=("node-a", "node-b")), 403, None),
    (review(nodes=("Node_A",)), 403, None),  # not a node name
])
def test_judge_grants_one_node_to_the_agents_token_only(given, code, node):
    verdict = judge(given, service_account=AGENT, audience=AUDIENCE)
    assert (verdict.code, verdict.node) == (code, node) and verdict.reason


@pytest.mark.parametrize("header, token", [
    ("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None), (None, None), ("", None),
])
def test_bearer_token(header, token):
    assert bearer_token(header) == token


def test_the_issuer_reads_the_bus_namespace_and_cluster_as_the_agents_do(tmp_path, monkeypatch):
    config = tmp_path / "tidal.yaml"
    config.write_text("apiVersion: config.tidal.dev/v1alpha1\nkind: TidalConfiguration\n"
                      "common: {namespace: prod, cluster: east}\ntopology: {pool: gpu}\n")
    (tmp_path / "account").write_text(f"{new_key('account')[1]}\n")
    monkeypatch.setenv("TIDAL_CONFIG", str(config))
    settings = CredentialsSettings(signing_key_file=tmp_path / "none", account_file=tmp_path / "account")
    assert (settings.namespace, settings.cluster) == ("prod", "east")
    monkeypatch.setenv("TIDAL_CLUSTER", "west")  # the environment overrides the file, as for every service
    assert CredentialsSettings(signing_key_file=tmp_path / "none", account_file=tmp_path / "account").cluster == "west"


def test_renewal_comes_at_two_thirds_of_the_life_and_expiry_is_bounded():
    assert renew_at(1000, 4600) == 3400  # 1000 + 3600 · 2/3
    assert expiry(1000.9, 3600) == 4600
