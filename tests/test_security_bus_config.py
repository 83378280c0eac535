"""Bus credentials and TLS settings, without a broker: what reaches
nats.connect and aiokafka's constructors, which combinations are refused
(one line, naming the variable), and that no password is ever shown —
in settings reprs, URLs in messages, or `tidal up`'s description."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import nkeys
import pytest
from pydantic import SecretStr

from tidal_bus import BusConfigError, BusError, StartAt, backend_from_url
from tidal_bus import kafka_backend, kafka_group, kafka_topics, nats_backend
from tidal_bus.auth import BusAuth, inbox_prefix_for, redact_url, url_credentials
from tidal_bus.embedded import free_port
from tidal_bus.nkey import new_user_key, new_user_seed, user_public_key
from tidal_runtime import ServiceSettings
from tidal_schemas.streams import stream

SECRET = "s3cr3t-Pa55"

REDACTIONS = [
    ("nats://svc:s3cr3t@h:4222", "nats://svc:***@h:4222"),
    ("nats://t0ken@h:4222", "nats://***@h:4222"),
    ("tls://svc:s3cr3t@h1:4222,tls://svc:s3cr3t@h2:4222", "tls://svc:***@h1:4222,tls://svc:***@h2:4222"),
    ("kafka://svc:p%40ss@k:9092", "kafka://svc:***@k:9092"),
    ("nats://h:4222", "nats://h:4222"),
    ("bus at nats://u:pw@h:1 failed", "bus at nats://u:***@h:1 failed"),
]


@pytest.mark.parametrize("url, shown", REDACTIONS)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_url_credentials_are_unquoted():
    assert url_credentials("kafka://svc:p%40ss@k:9092") == ("svc", SecretStr("p@ss"))
    assert url_credentials("nats://h:4222") == (None, None)


def secret_file(tmp_path: Path, name: str, text: str = SECRET + "\n") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------- NATS -------

def test_nats_user_and_password_file(tmp_path):
    auth = BusAuth(user="scoring", password_file=secret_file(tmp_path, "pw"))
    options = auth.nats_options("nats://h:4222")
    assert options == {"user": "scoring", "password": SECRET, "inbox_prefix": "_INBOX_scoring"}
    assert SECRET not in repr(auth) and SECRET not in str(auth)
    from_files = BusAuth(user_file=secret_file(tmp_path, "user", "topology-node-a\n"),
                         password_file=secret_file(tmp_path, "pw"))
    assert from_files.nats_options("nats://h:4222")["user"] == "topology-node-a"


def test_nats_credentials_in_the_url():
    options = BusAuth().nats_options("nats://placement:pw@h:4222")
    assert options == {"user": "placement", "password": "pw", "inbox_prefix": "_INBOX_placement"}
    assert BusAuth().nats_options("nats://t0ken@h:4222") == {"token": "t0ken"}  # a lone userinfo is a token


def test_nats_token_creds_and_nkey_files(tmp_path):
    assert BusAuth(token_file=secret_file(tmp_path, "tok")).nats_options("nats://h") == {"token": SECRET}
    creds = secret_file(tmp_path, "svc.creds", _creds("scoring").text())
    # the inbox is named after the user in the JWT: its only subscribe right
    assert BusAuth(creds_file=creds).nats_options("nats://h") == {"user_credentials": str(creds),
                                                                  "inbox_prefix": "_INBOX_scoring"}
    assert BusAuth(creds_file=creds, user="other").nats_options("nats://h")["inbox_prefix"] == "_INBOX_other"
    seed = secret_file(tmp_path, "svc.nk", new_user_seed() + "\n")
    assert BusAuth(nkey_seed_file=seed).nats_options("nats://h") == {"nkeys_seed": str(seed)}


def _creds(user: str):
    from tidal_bus.nats_identity import mint
    from tidal_bus.nats_permissions import service_permissions
    from tidal_bus.nkey import new_key

    return mint(new_key("account")[0], new_key("account")[1], user,
                service_permissions(user, namespace="tidal", cluster="c1"), iat=1)


@pytest.mark.parametrize("text, reason", [
    ("-----BEGIN NATS USER JWT-----\n", "block is empty"),  # nats-py would wait forever on this one
    ("just a seed\n", "not a .creds file"),
    ("swap", "not the key the JWT was issued to"),
])
def test_a_bad_creds_file_is_refused_before_connecting_without_showing_the_seed(tmp_path, text, reason):
    good = _creds("scoring")
    if text == "swap":  # another user's seed under this JWT
        text = good.text().replace(good.seed, _creds("scoring").seed)
    path = secret_file(tmp_path, "svc.creds", text)
    with pytest.raises(BusConfigError, match=reason) as refused:
        BusAuth(creds_file=path).nats_options("nats://h")
    assert "TIDAL_BUS_CREDS_FILE" in str(refused.value) and "SU" not in str(refused.value).replace(str(path), "")


def test_an_nkey_seed_as_a_file_or_a_value_with_the_user_naming_only_the_inbox(tmp_path, monkeypatch):
    """What `tidal nats-config` issues: the seed is the identity (nats-py
    signs the server's nonce with it); the user is not sent to the server,
    it only names the reply inbox the server's config allows that key."""
    value = new_user_seed()
    seed_file = secret_file(tmp_path, "topology-node-a.nk", value + "\n")
    user_file = secret_file(tmp_path, "user", "topology-node-a\n")
    inbox = "_INBOX_topology-node-a"
    assert BusAuth(user_file=user_file, nkey_seed_file=seed_file).nats_options("nats://h") == {
        "inbox_prefix": inbox, "nkeys_seed": str(seed_file)}
    monkeypatch.setenv("TIDAL_BUS_USER", "topology-node-a")
    monkeypatch.setenv("TIDAL_BUS_NKEY_SEED", value)
    auth = BusAuth.from_env()
    assert auth.nats_options("nats://h") == {"inbox_prefix": inbox, "nkeys_seed_str": value}
    assert value not in repr(auth) + str(auth)


def test_our_keys_are_the_nkeys_librarys_keys():
    """Tidal encodes and decodes nkeys itself (once per seed, checksum
    checked); nats-py signs with the nkeys package: the two must agree."""
    for _ in range(50):
        seed, public = new_user_key()
        pair = nkeys.from_seed(bytearray(seed.encode()))
        assert pair.seed.decode() == seed and pair.public_key.decode() == public == user_public_key(seed + "\n")
        assert pair.verify(b"nonce", pair.sign(b"nonce"))


@pytest.mark.parametrize("text, reason", [
    ("SUAxxx\n", "not an nkey user seed"),
    ("UDY6JIUO7VRWXU2OSXJL5P6UTI7AGQTJJCTS546TRDXD2H2UTOTDMHLB\n", "not an nkey user seed"),  # a public key
    ("{account}\n", "not an nkey user seed"),  # an account's seed, not a user's
    ("{mistyped}\n", "checksum"),
    ("", "not an nkey user seed"),
])
def test_a_bad_nkey_seed_is_refused_before_connecting_without_showing_it(tmp_path, text, reason):
    seed = new_user_seed()
    account = nkeys.encode_seed(nkeys.decode_seed(bytearray(seed.encode()))[1], nkeys.PREFIX_BYTE_ACCOUNT).decode()
    text = text.format(account=account, mistyped=seed[:20] + ("A" if seed[20] != "A" else "B") + seed[21:])
    for auth, name in ((BusAuth(nkey_seed_file=secret_file(tmp_path, "x.nk", text)), "TIDAL_BUS_NKEY_SEED_FILE"),
                       (BusAuth(nkey_seed=SecretStr(text)), "TIDAL_BUS_NKEY_SEED")):
        with pytest.raises(BusConfigError, match=reason) as refused:
            backend_from_url("nats://h:4222", "tidal", auth=auth)
        message = str(refused.value)
        assert message.startswith(name + ":") and "\n" not in message
        assert not (text.strip() and text.strip()[:12] in message)


def test_inbox_prefix_is_one_token():
    assert inbox_prefix_for("topology-ip-10-0-0-1.ec2.internal") == "_INBOX_topology-ip-10-0-0-1_ec2_internal"


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("ca")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
                    "-keyout", str(directory / "ca.key"), "-out", str(directory / "ca.pem")],
                   check=True, capture_output=True)
    return directory / "ca.pem"


def test_nats_tls_from_a_ca_file_or_a_tls_url(ca_file):
    options = BusAuth(tls_ca_file=ca_file, tls_hostname="nats.example").nats_options("nats://h:4222")
    assert isinstance(options["tls"], ssl.SSLContext) and options["tls"].verify_mode == ssl.CERT_REQUIRED
    assert options["tls_hostname"] == "nats.example"
    assert isinstance(BusAuth().nats_options("tls://h:4222")["tls"], ssl.SSLContext)
    assert "tls" not in BusAuth().nats_options("nats://h:4222")


BAD_NATS = [
    (dict(user="a", token=SecretStr("t")), "choose one of user/password and token"),
    (dict(password=SecretStr("p")), "a password needs a user"),
    (dict(user="a", sasl_mechanism="PLAIN"), "Kafka settings"),
    (dict(user="a", password=SecretStr("p"), nkey_seed=SecretStr(new_user_seed())),
     "choose one of user/password and nkey seed"),
    (dict(token=SecretStr("t"), nkey_seed=SecretStr(new_user_seed())), "choose one of token and nkey seed"),
]


@pytest.mark.parametrize("fields, message", BAD_NATS)
def test_bad_nats_combinations_are_one_line_errors(fields, message):
    with pytest.raises(BusConfigError, match=message) as refused:
        backend_from_url("nats://h:4222", "tidal", auth=BusAuth(**fields))
    assert "\n" not in str(refused.value)


BAD_SETTINGS = [
    ({"TIDAL_BUS_PASSWORD": SECRET, "TIDAL_BUS_PASSWORD_FILE": "{pw}"}, "not both"),
    ({"TIDAL_BUS_NKEY_SEED": SECRET, "TIDAL_BUS_NKEY_SEED_FILE": "{pw}"}, "not both"),
    ({"TIDAL_BUS_PASSWORD_FILE": "/nonexistent/pw"}, "TIDAL_BUS_PASSWORD_FILE '/nonexistent/pw' is not a readable"),
    ({"TIDAL_BUS_TLS_CERT_FILE": "{pw}"}, "needs both TIDAL_BUS_TLS_CERT_FILE and TIDAL_BUS_TLS_KEY_FILE"),
    ({"TIDAL_BUS_SASL_MECHANISM": "GSSAPI"}, "sasl_mechanism"),
]


@pytest.mark.parametrize("env, message", BAD_SETTINGS)
def test_bad_settings_name_the_variable_and_never_echo_the_secret(monkeypatch, tmp_path, env, message):
    pw = secret_file(tmp_path, "pw")
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(pw=pw))
    with pytest.raises(BusConfigError, match=message) as refused:
        BusAuth.from_env()
    assert SECRET not in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ValueError) as in_service:  # a service fails at start, the same way
        ServiceSettings()
    assert SECRET not in str(in_service.value)


def test_service_settings_read_the_bus_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("TIDAL_BUS_URL", "nats://scoring:inline-pw@h:4222")
    monkeypatch.setenv("TIDAL_BUS_USER", "scoring")
    monkeypatch.setenv("TIDAL_BUS_PASSWORD_FILE", str(secret_file(tmp_path, "pw")))
    settings = ServiceSettings()
    assert settings.bus_auth.password_secret().get_secret_value() == SECRET
    shown = repr(settings) + str(settings) + settings.safe_bus_url()
    assert SECRET not in shown and "inline-pw" not in shown and "scoring:***@h" in shown


async def test_nats_connect_receives_the_options_and_errors_hide_the_password(monkeypatch, tmp_path):
    seen = {}

    async def fake_connect(**options):
        seen.update(options)
        raise OSError("connection refused")

    monkeypatch.setattr(nats_backend.nats, "connect", fake_connect)
    backend = backend_from_url(f"nats://scoring:{SECRET}@127.0.0.1:1", "tidal", connect_deadline_s=2)
    with pytest.raises(BusError) as failed:
        await backend.connect()
    assert seen["user"] == "scoring" and seen["password"] == SECRET and seen["inbox_prefix"] == "_INBOX_scoring"
    assert SECRET not in str(failed.value) and "scoring:***@127.0.0.1:1" in str(failed.value)


async def test_a_real_refused_connection_hides_the_password():
    backend = backend_from_url(f"nats://scoring:{SECRET}@127.0.0.1:{free_port()}", "tidal", connect_deadline_s=1)
    with pytest.raises(BusError) as failed:
        await backend.connect()
    assert SECRET not in str(failed.value) and "***" in str(failed.value)


# --------------------------------------------------------------- Kafka ------

KAFKA = [
    (dict(user="svc", password=SecretStr("pw"), sasl_mechanism="SCRAM-SHA-512"), "kafka://k:9092",
     {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "svc",
      "sasl_plain_password": "pw"}),
    (dict(sasl_mechanism="PLAIN", tls=True), "kafka://svc:pw@k:9092",
     {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_plain_username": "svc",
      "sasl_plain_password": "pw", "ssl_context": ssl.SSLContext}),
    (dict(tls=True), "kafka://k:9092", {"security_protocol": "SSL", "ssl_context": ssl.SSLContext}),
    (dict(), "kafka://k:9092", {"security_protocol": "PLAINTEXT"}),
]


def _shape(options: dict) -> dict:
    return {k: type(v) if isinstance(v, ssl.SSLContext) else v for k, v in options.items()}


@pytest.mark.parametrize("fields, url, expected", KAFKA)
def test_kafka_sasl_and_tls_options(fields, url, expected):
    assert _shape(BusAuth(**fields).kafka_options(url)) == expected


async def test_kafka_options_reach_every_aiokafka_client(monkeypatch):
    made: list[tuple[str, dict]] = []

    def recorder(kind):
        class Fake:
            def __init__(self, **options):
                made.append((kind, options))

            async def start(self):
                return None

            async def stop(self):
                return None

            async def close(self):
                return None

            async def describe_cluster(self):  # the admin's metadata answer: one broker
                return {"cluster_id": "c", "controller_id": 1, "brokers": [{"node_id": 1, "host": "k1", "port": 9092}]}
        return Fake

    for module in (kafka_backend, kafka_group, kafka_topics):  # every module that makes a client
        for name in ("AIOKafkaAdminClient", "AIOKafkaProducer", "AIOKafkaConsumer"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, recorder(name))
    auth = BusAuth(user="svc", password=SecretStr("pw"), sasl_mechanism="SCRAM-SHA-256", tls=True)
    backend = backend_from_url("kafka://k1:9092,k2:9092", "tidal", auth=auth)
    await backend.connect()
    kafka_group.KafkaGroupSubscription(backend, stream("node.metrics"), "g", StartAt.earliest(), None)
    assert [kind for kind, _ in made] == ["AIOKafkaAdminClient", "AIOKafkaProducer", "AIOKafkaConsumer"]
    for _, options in made:
        assert options["bootstrap_servers"] == ["k1:9092", "k2:9092"]  # every seed
        assert options["security_protocol"] == "SASL_SSL" and options["sasl_mechanism"] == "SCRAM-SHA-256"
        assert options["sasl_plain_username"] == "svc" and options["sasl_plain_password"] == "pw"
        assert isinstance(options["ssl_context"], ssl.SSLContext)
    await backend.close()


BAD_KAFKA = [
    (dict(user="svc", password=SecretStr("pw")), "TIDAL_BUS_SASL_MECHANISM"),
    (dict(sasl_mechanism="PLAIN"), "needs TIDAL_BUS_USER, a password"),
    (dict(security_protocol="SASL_SSL"), "SASL_SSL needs SASL credentials"),
    (dict(user="svc", password=SecretStr("pw"), sasl_mechanism="PLAIN", security_protocol="SSL"),
     "SSL does not use the SASL credentials"),
    (dict(tls=True, security_protocol="PLAINTEXT"), "TLS files are set but"),
    (dict(token=SecretStr("t")), "TIDAL_BUS_TOKEN is a NATS setting"),
    (dict(nkey_seed=SecretStr("SUA")), "TIDAL_BUS_NKEY_SEED is a NATS setting"),  # Kafka never reads the seed
]


@pytest.mark.parametrize("fields, message", BAD_KAFKA)
def test_bad_kafka_combinations_are_one_line_errors(fields, message):
    with pytest.raises(BusConfigError, match=message) as refused:
        backend_from_url("kafka://k:9092", "tidal", auth=BusAuth(**fields))
    assert "\n" not in str(refused.value) and "pw" not in str(refused.value).replace("password", "")


# ------------------------------------------------------------- tidal up -----

def test_stack_description_hides_the_password(tmp_path):
    from tidal_cli.stack import Stack

    stack = Stack(tmp_path, bus_url=f"nats://admin:{SECRET}@nats:4222", services=[])
    shown = stack.describe()
    assert SECRET not in shown and "nats://admin:***@nats:4222" in shown
