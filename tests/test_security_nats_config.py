"""`tidal nats-config` and the permission table behind it, offline: each
user's permissions, the node agent's single-key subjects, the table kept in
step with what the services really subscribe to, and the files written (the
server config in operator mode, each user's JWT, the Secrets)."""

from __future__ import annotations

import re
import stat
import subprocess

import pytest
import yaml

from tidal_bus.embedded import nats_server_binary
from tidal_bus.nats_permissions import ACCESS, ADMIN, service_permissions, users
from tidal_bus.nats_jwt import parse_creds
from tidal_bus.nkey import public_key, user_public_key
from tidal_bus.subjects import nats_subject
from tidal_cli.main import main
from tidal_schemas.streams import partition_for, stream

NS, CLUSTER = "tidal", "prod"


def test_node_agent_may_publish_its_own_node_only():
    perms = service_permissions("topology", namespace=NS, cluster=CLUSTER, node="ip-10-0-0-1.ec2.internal")
    own = [s for s in perms.publish if s.startswith(f"{NS}.")]
    node, key = "ip-10-0-0-1.ec2.internal", "ip-10-0-0-1%2Eec2%2Einternal"
    expected = [nats_subject(NS, stream(name), CLUSTER, partition_for(node, stream(name).partitions), node)
                for name in ("node.topology", "node.metrics", "action.result", "cpu.assignment")]
    assert own == expected + [f"{NS}.dead_letter.{CLUSTER}.*.*"]
    assert all(s.endswith(key) for s in expected)
    assert perms.subscribe == ("_INBOX_topology-ip-10-0-0-1_ec2_internal.>",)


@pytest.mark.parametrize("service", [s for s in ACCESS if s != "topology"])
def test_central_services_publish_their_streams_in_their_cluster(service):
    perms = service_permissions(service, namespace=NS, cluster=CLUSTER)
    own = {s for s in perms.publish if s.startswith(f"{NS}.")}
    published = (*ACCESS[service].publishes, "dead.letter")
    lanes = {f"{NS}.{stream(n).token}.{CLUSTER}.*.*.{stream(n).side_lane}" for n in published if stream(n).side_lane}
    assert own == {f"{NS}.{stream(n).token}.{CLUSTER}.*.*" for n in published} | lanes
    assert perms.subscribe == (f"_INBOX_{service}.>",)


@pytest.mark.parametrize("service", list(ACCESS))
def test_no_service_may_change_or_delete_streams_or_use_wide_wildcards(service):
    perms = service_permissions(service, namespace=NS, cluster=CLUSTER, node="n1")
    for subject in perms.publish:
        assert not any(f".{verb}." in subject for verb in ("UPDATE", "DELETE", "PURGE")) or "KV_" in subject, subject
        assert subject not in (">", "$JS.API.>", f"{NS}.>", "_INBOX.>"), subject
        assert not subject.startswith(("$JS.API.STREAM.*", "$JS.API.CONSUMER.*")), subject
    assert not [s for s in perms.subscribe if not s.startswith("_INBOX_")]


def test_consumer_rights_are_per_durable_of_the_services_own_groups():
    perms = service_permissions("scoring", namespace=NS, cluster=CLUSTER).publish
    assert "$JS.API.CONSUMER.CREATE.TIDAL_NODE_METRICS.scoring-prod_node_metrics_p7.>" in perms
    assert "$JS.ACK.TIDAL_NODE_METRICS.scoring-prod_node_metrics_p0.>" in perms
    assert "$KV.TIDAL_MEMBERS.node_metrics.scoring-prod.*" in perms
    assert not [s for s in perms if "oversell" in s]


def _instances():
    """Each deployable service, built as a service test would (no bus I/O)."""
    from tidal_bridge.service import BridgeService
    from tidal_bridge.settings import BridgeSettings
    from tidal_oversell.service import OversellService
    from tidal_oversell.settings import OversellSettings
    from tidal_placement.service import PlacementService
    from tidal_placement.settings import PlacementSettings
    from tidal_remediation.service import RemediationService
    from tidal_remediation.settings import RemediationSettings
    from tidal_scoring.service import ScoringService
    from tidal_scoring.settings import ScoringSettings
    from tidal_topology.service import TopologyService
    from tidal_topology.settings import TopologySettings
    from tidal_webhook import WebhookService, WebhookSettings

    common = dict(cluster=CLUSTER, namespace=NS)
    return [
        TopologyService(TopologySettings(**common, node_name="n1", numa_override="0:0", cgroup_parent="none",
                                         state_file="/nonexistent/cpu.json"), bus=object()),
        ScoringService(ScoringSettings(**common), bus=object()),
        PlacementService(PlacementSettings(**common), bus=object()),
        OversellService(OversellSettings(**common), bus=object()),
        RemediationService(RemediationSettings(**common), bus=object()),
        BridgeService(BridgeSettings(**common), bus=object()),
        WebhookService(WebhookSettings(**common), bus=object()),
    ]


@pytest.mark.parametrize("service", _instances(), ids=lambda s: s.name)
def test_the_table_matches_what_each_service_subscribes_and_produces(service):
    access = ACCESS[service.name]
    declared = {(sub.stream, sub.group or service.default_group()) for sub in service.subscriptions()}
    table = {(name, group.format(service=service.name, cluster=CLUSTER, node="n1")) for name, group in access.consumes}
    assert declared == table
    assert set(service.produces) <= set(access.publishes)


def _claims(token: str) -> dict:
    from tidal_bus.nats_jwt import decode_claims

    return decode_claims(token)


def _preloaded(path) -> dict[str, dict]:
    """The account JWTs the server config preloads: account key -> claims."""
    text = path.read_text()
    body = text[text.index("resolver_preload: {"):].split("}", 1)[0]
    return {key: _claims(jwt) for key, jwt in re.findall(r"^\s+(A[A-Z2-7]{55}): (\S+)$", body, re.MULTILINE)}


def test_cli_writes_config_creds_and_secrets_and_keeps_the_keys(tmp_path, capsys):
    out, secrets_file = tmp_path / "nats.conf", tmp_path / "secrets.yaml"
    argv = ["nats-config", "--cluster", CLUSTER, "--nodes", "node-a,node-b", "--out", str(out),
            "--k8s-secrets", str(secrets_file)]
    assert main(argv) == 0
    credentials = tmp_path / "nats.conf.credentials"
    first = {p.name: p.read_text() for p in credentials.glob("*.nk")}
    everyone = users(NS, CLUSTER, ["node-a", "node-b"])
    authority_files = {"operator.nk", "system-account.nk", "account.nk", "account-signing.nk"}
    assert set(first) == {f"{u}.nk" for u in everyone} | authority_files
    assert all(stat.S_IMODE((credentials / name).stat().st_mode) == 0o600 for name in first)
    assert all(seed.startswith("SU") for name, seed in first.items() if name not in authority_files)
    assert len(set(first.values())) == len(first)
    account = (credentials / "account.pub").read_text().strip()
    signing = public_key(first["account-signing.nk"], "account")
    # the server config: the operator, the system account, the account JWTs; no user, no seed
    text = out.read_text()
    assert "sync_interval: always" in text and "resolver: MEMORY" in text
    assert not [seed for seed in first.values() if seed.strip() in text]
    assert not [u for u in everyone if user_public_key(first[f"{u}.nk"]) in text]
    accounts = _preloaded(out)
    assert set(accounts) == {account, public_key(first["system-account.nk"], "account")}
    assert accounts[account]["nats"]["signing_keys"] == [signing] and "revocations" not in accounts[account]["nats"]
    operator = public_key(first["operator.nk"], "operator")
    assert {c["iss"] for c in accounts.values()} == {operator}
    # each user's creds: its own key, exactly its permissions, signed by the signing key for the account
    for user, granted in everyone.items():
        creds = parse_creds((credentials / f"{user}.creds").read_text())
        claims = _claims(creds.jwt)
        assert stat.S_IMODE((credentials / f"{user}.creds").stat().st_mode) == 0o600
        assert creds.seed == first[f"{user}.nk"].strip() and claims["sub"] == user_public_key(creds.seed)
        assert (claims["name"], claims["iss"], claims["nats"]["issuer_account"]) == (user, signing, account)
        assert claims["nats"]["pub"] == {"allow": list(granted.publish)}
        assert claims["nats"]["sub"] == {"allow": list(granted.subscribe)}
    check = subprocess.run([nats_server_binary(), "-c", str(out), "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr

    secrets = {d["metadata"]["name"]: d for d in yaml.safe_load_all(secrets_file.read_text())}
    # nothing per node: node agents get their credentials from the issuer, whose TLS Secret is here
    assert set(secrets) == {"nats-config", f"tidal-bus-{ADMIN}", "tidal-nats-account-signing", "tidal-credentials-tls",
                            "tidal-credentials-ca", *(f"tidal-bus-{s}" for s in ACCESS if s != "topology")}
    assert secrets["nats-config"]["stringData"] == {"nats.conf": text}
    assert secrets["tidal-bus-scoring"]["stringData"] == {
        "user": "scoring", "seed": first["scoring.nk"].strip(), "creds": (credentials / "scoring.creds").read_text()}
    assert set(secrets["tidal-credentials-tls"]["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert set(secrets["tidal-credentials-ca"]["stringData"]) == {"ca.crt"}  # what the agents mount: no key
    assert secrets["tidal-nats-account-signing"]["stringData"] == {"seed": first["account-signing.nk"].strip(),
                                                                   "account": account}
    assert not [s for s in secrets.values() for v in s.get("stringData", {}).values()
                if first["operator.nk"].strip() in v or first["account.nk"].strip() in v]  # those stay offline
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    assert "10 new key(s), 0 kept; 10 JWT(s) issued; 0 node(s) revoked" in capsys.readouterr().out

    # off Kubernetes, node-c joins and node-b leaves: every key is kept, node-c gets its own, node-b's JWT
    # is revoked in the account JWT (the server refuses it); no node is in any Secret, and the issuer's
    # certificate is kept
    assert main([*argv[:4], "node-a,node-c", *argv[5:]]) == 0
    again = {p.name: p.read_text() for p in credentials.glob("*.nk")}
    assert {k: v for k, v in again.items() if k in first} == first
    node_b = _claims(parse_creds((credentials / "topology-node-b.creds").read_text()).jwt)
    assert _preloaded(out)[account]["nats"]["revocations"] == {node_b["sub"]: node_b["iat"]}
    again_secrets = {d["metadata"]["name"]: d for d in yaml.safe_load_all(secrets_file.read_text())}
    assert set(again_secrets) == set(secrets)
    assert again_secrets["tidal-credentials-tls"] == secrets["tidal-credentials-tls"]
    assert "1 new key(s), 9 kept; 1 JWT(s) issued; 1 node(s) revoked" in capsys.readouterr().out


def test_cli_refuses_a_damaged_seed_file_in_one_line(tmp_path, capsys):
    out = tmp_path / "nats.conf"
    argv = ["nats-config", "--cluster", CLUSTER, "--nodes", "node-a", "--out", str(out)]
    assert main(argv) == 0
    seed_file = tmp_path / "nats.conf.credentials" / "topology-node-a.nk"
    seed = seed_file.read_text().strip()
    mistyped = seed[:30] + ("A" if seed[30] != "A" else "B") + seed[31:]  # the checksum catches it
    seed_file.write_text(mistyped + "\n")
    before = out.read_text()
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "topology-node-a.nk" in err and "checksum" in err and err.count("\n") == 1 and seed[:30] not in err
    assert out.read_text() == before  # nothing half-written


def test_a_rerun_over_an_earlier_runs_passwords_says_they_are_unused(tmp_path, capsys):
    credentials = tmp_path / "nats.conf.credentials"
    credentials.mkdir()
    (credentials / "scoring.password").write_text("old\n")
    assert main(["nats-config", "--cluster", CLUSTER, "--nodes", "node-a", "--out", str(tmp_path / "nats.conf")]) == 0
    assert "1 password file(s) of an earlier run" in capsys.readouterr().out
    assert "password" not in (tmp_path / "nats.conf").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "Node_A"], "is not a node name"),
    (["--nodes", ","], "at least one node"),
    (["--nodes", "a", "--cluster", "a.b"], "--cluster"),
    (["--nodes", "a", "--tls-cert", "c.pem"], "--tls-cert and --tls-key together"),
])
def test_cli_refuses_bad_input_in_one_line(tmp_path, capsys, argv, message):
    base = {"--cluster": CLUSTER, "--out": str(tmp_path / "n.conf")}
    args = dict(zip(argv[::2], argv[1::2]))
    full = ["nats-config"] + [x for k, v in {**base, **args}.items() for x in (k, v)]
    assert main(full) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_run_without_nodes_revokes_the_node_agents_made_ahead(tmp_path, capsys):
    """Upgrading from per-node Secrets: their JWTs never expire, so a run
    that lists no node (node agents then ask the issuer) revokes them all."""
    out = tmp_path / "nats.conf"
    assert main(["nats-config", "--cluster", CLUSTER, "--nodes", "node-a,node-b", "--out", str(out)]) == 0
    credentials = tmp_path / "nats.conf.credentials"
    made = {n: _claims(parse_creds((credentials / f"topology-{n}.creds").read_text()).jwt)
            for n in ("node-a", "node-b")}
    capsys.readouterr()
    assert main(["nats-config", "--cluster", CLUSTER, "--out", str(out)]) == 0
    account = (credentials / "account.pub").read_text().strip()
    assert _preloaded(out)[account]["nats"]["revocations"] == {c["sub"]: c["iat"] for c in made.values()}
    assert "2 node(s) revoked" in capsys.readouterr().out
