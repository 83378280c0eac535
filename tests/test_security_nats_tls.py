"""NATS over TLS, with certificates made at test time by the `openssl` CLI:
a Bus that trusts the CA publishes and consumes; one without the CA, or
without the client certificate the server requires, is refused at once
with a one-line reason."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from builders import metrics
from conftest import NATS_TEST_OPTIONS, patience
from tidal_bus import Bus, BusConfigError, BusError
from tidal_bus.auth import BusAuth
from tidal_bus.embedded import EmbeddedNats

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=patience(60))


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client
    certificate, all signed by the CA."""
    p = {name: directory / name for name in ("ca.key", "ca.pem", "server.key", "server.pem", "client.key",
                                             "client.pem", "san.ext")}
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=tidal-test-ca",
            "-keyout", str(p["ca.key"]), "-out", str(p["ca.pem"]))
    p["san.ext"].write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        csr = directory / f"{who}.csr"
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=tidal-{who}", "-keyout", str(p[f"{who}.key"]),
                "-out", str(csr))
        openssl("x509", "-req", "-in", str(csr), "-CA", str(p["ca.pem"]), "-CAkey", str(p["ca.key"]),
                "-CAcreateserial", "-days", "1", "-out", str(p[f"{who}.pem"]), "-extfile", str(p["san.ext"]))
    return p


def tls_server(directory: Path, pki: dict[str, Path], verify_clients: bool) -> EmbeddedNats:
    config = directory / "tls.conf"
    client = f'\n  ca_file: "{pki["ca.pem"]}"\n  verify: true' if verify_clients else ""
    config.write_text(f'tls {{\n  cert_file: "{pki["server.pem"]}"\n  key_file: "{pki["server.key"]}"\n'
                      f'  timeout: 2{client}\n}}\n')
    return EmbeddedNats(directory, config_file=config).start()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_nats(tmp_path_factory, pki):
    server = tls_server(tmp_path_factory.mktemp("tls-nats"), pki, verify_clients=False)
    yield server
    server.stop()


CONNECT_DEADLINE_S = patience(10.0)


def bus(url: str, auth: BusAuth) -> Bus:
    return Bus.from_url(url, namespace="t" + uuid.uuid4().hex[:10], cluster="c1", source="test", auth=auth,
                        **{**NATS_TEST_OPTIONS, "connect_deadline_s": CONNECT_DEADLINE_S})


async def round_trip(b: Bus) -> list[str]:
    """Publish two events, consume them in a group; the keys handled."""
    got: list[str] = []
    done = asyncio.Event()

    async def handle(envelope, delivery):
        got.append(envelope.key)
        if len(got) == 2:
            done.set()

    await b.publish(metrics("n1"))
    await b.publish(metrics("n2"))
    consumer = b.consumer("node.metrics", "tls-test", handle)
    task = asyncio.create_task(consumer.run())
    await asyncio.wait_for(done.wait(), patience(20))
    consumer.stop()
    await asyncio.wait_for(task, patience(20))
    return sorted(got)


async def test_publish_and_consume_over_tls_with_the_ca(tls_nats, pki):
    async with bus(tls_nats.url, BusAuth(tls_ca_file=pki["ca.pem"])) as b:
        assert await round_trip(b) == ["n1", "n2"]
    # a tls:// URL asks for TLS by itself; the CA still comes from the settings
    async with bus(tls_nats.url.replace("nats://", "tls://"), BusAuth(tls_ca_file=pki["ca.pem"])) as b:
        await b.publish(metrics("n3"))


async def test_a_client_without_the_ca_is_refused_with_the_reason(tls_nats):
    started = asyncio.get_running_loop().time()
    with pytest.raises(BusConfigError, match="(?i)certificate verify failed") as refused:
        async with bus(tls_nats.url.replace("nats://", "tls://"), BusAuth()):
            pass
    message = str(refused.value)
    assert "TIDAL_BUS_TLS_CA_FILE" in message and "\n" not in message
    # refused at once, not at the connect deadline (a hang guard long enough that no machine takes half of it)
    assert asyncio.get_running_loop().time() - started < CONNECT_DEADLINE_S / 2


async def test_a_plain_client_cannot_use_a_tls_only_server(tls_nats):
    with pytest.raises(BusError):
        async with bus(tls_nats.url, BusAuth()):
            pass


async def test_mutual_tls_needs_the_client_certificate(tmp_path, pki):
    server = tls_server(tmp_path, pki, verify_clients=True)
    try:
        with_cert = BusAuth(tls_ca_file=pki["ca.pem"], tls_cert_file=pki["client.pem"],
                            tls_key_file=pki["client.key"])
        async with bus(server.url, with_cert) as b:
            await b.publish(metrics("n1"))
        with pytest.raises(BusConfigError, match="requires a client certificate: set TIDAL_BUS_TLS_CERT_FILE"):
            async with bus(server.url, BusAuth(tls_ca_file=pki["ca.pem"])):
                pass
    finally:
        server.stop()
