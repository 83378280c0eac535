"""The webhook logged in as its own NATS user, on the configuration `tidal
nats-config` generates: it reads oversell's `node.allocatable` whole and
the server refuses nothing it does; its user cannot publish the figures."""

from __future__ import annotations

import uuid

import pytest

from conftest import NATS_TEST_OPTIONS, start_service, stop_service, wait_until
from tidal_bus import Bus
from tidal_bus.auth import BusAuth, BusPermissionError
from tidal_bus.embedded import EmbeddedNats
from tidal_cli.main import main as tidal
from tidal_cli.webhook_tls import make_webhook_tls
from tidal_webhook import WebhookService, WebhookSettings
from webhook_parts import granted

CLUSTER = "c1"


async def test_the_webhook_reads_the_figures_as_its_own_user(tmp_path):
    namespace = "w" + uuid.uuid4().hex[:10]
    config, credentials = tmp_path / "nats.conf", tmp_path / "creds"
    assert tidal(["nats-config", "--namespace", namespace, "--cluster", CLUSTER, "--nodes", "node-a",
                  "--out", str(config), "--credentials-dir", str(credentials), "--store-dir", ""]) == 0
    server = EmbeddedNats(tmp_path / "server", config_file=config).start()

    def bus(user: str) -> Bus:
        return Bus.from_url(server.url, namespace=namespace, cluster=CLUSTER, source=user,
                            auth=BusAuth(creds_file=credentials / f"{user}.creds"),
                            **{**NATS_TEST_OPTIONS, "connect_deadline_s": 10.0})
    try:
        async with bus("admin") as admin:
            await admin.ensure_streams()
        since = server.log_path.stat().st_size
        async with bus("oversell") as oversell:
            await oversell.publish(granted(("node-a", 12000, 40960)))
        cert, key, _ = make_webhook_tls(["localhost"], ["127.0.0.1"]).write(tmp_path / "tls")
        settings = WebhookSettings(bus_url=server.url, namespace=namespace, cluster=CLUSTER, http_port=0,
                                   http_host="127.0.0.1", https_host="127.0.0.1", https_port=0, tls_cert_file=cert,
                                   tls_key_file=key)
        async with bus("webhook") as webhook_bus:
            service = WebhookService(settings, bus=webhook_bus)
            task = await start_service(service, timeout=30)
            try:
                await wait_until(lambda: "node-a" in service.figures.held, what="node-a's figure, read as webhook")
            finally:
                await stop_service(service, task)
            log = server.log_path.read_bytes()[since:].decode(errors="replace")
            assert [line for line in log.splitlines() if "Violation" in line] == []
            with pytest.raises(BusPermissionError):
                await webhook_bus.publish(granted(("node-a", 99000, 99000)))
    finally:
        server.stop()
