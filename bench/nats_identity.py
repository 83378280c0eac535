"""Node identities at 5,000 and 20,000 nodes, on the same nats-server:
  allow-list  the per-user allow-list config `tidal nats-config` wrote before
              issue 52 (a user per node in the server's configuration);
  jwt         operator mode with a `.creds` per node made ahead by `tidal
              nats-config`, all in one Secret (before issue 55 item 3);
  issued      today: operator mode, node agents' JWTs issued at run time by
              the credential issuer (tidal_credentials) from their
              ServiceAccount token, reviewed by the stand-in API server.

For each mechanism and node count it prints one JSON line:
  config_kb      size of the server configuration
  secret_kb      the largest Secret's data (the node agents' one before; the
                 1 MiB Secret limit applies to it)
  start_s        nats-server start: spawned until it accepts connections
  rss_mb         the server's resident memory once started
  issue_all_s    making every user's credentials ahead (allow-list: a key per
                 user and the config; jwt: a .creds per user; issued: the
                 central services' only)
  admit_s        a new node: allow-list = its key, the config regenerated
                 and written, the server reloaded (SIGHUP); jwt = its .creds
                 minted with the account signing key; issued = one request to
                 the issuer (TokenReview included, over HTTP); each until its
                 first successful connect
  issue_per_s    issued only: requests the issuer answers per second, one
                 after another (a whole cluster's agents starting at once)
  reload         whether admitting needed a reload

Run: .venv/bin/python bench/nats_identity.py [--nodes 5000 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).parent))
from _allow_list import render_allow_list  # noqa: E402

from tidal_bus.auth import inbox_prefix_for  # noqa: E402
from tidal_bus.embedded import free_port, nats_server_binary  # noqa: E402
from tidal_bus.nats_identity import Authority, account_jwt, mint, operator_jwt, render_server_config  # noqa: E402
from tidal_bus.nats_permissions import service_permissions, topology_user, users  # noqa: E402
from tidal_bus.nkey import new_user_key  # noqa: E402
from tidal_bus.node_login import NodeLogin  # noqa: E402
from tidal_credentials import CredentialIssuer, CredentialsSettings  # noqa: E402
from tidal_simulator.kube_api import KubeApiServer  # noqa: E402

NAMESPACE, CLUSTER = "tidal", "prod"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


async def first_connect(url: str, deadline_s: float = 300.0, **auth) -> float:
    """Seconds until a connect with `auth` succeeds (retried while refused)."""
    async def quiet(_error: Exception) -> None:  # a refusal before the reload is expected
        return None

    started = time.monotonic()
    while True:
        try:
            client = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5,
                                        error_cb=quiet, **auth)
            await client.close()
            return time.monotonic() - started
        except Exception:  # refused until the reload has applied: try again
            if time.monotonic() - started > deadline_s:
                raise
            await asyncio.sleep(0.02)


class Server:
    """nats-server on `config`, on a free loopback port; waited for as long
    as it takes (the allow-list at 20,000 nodes parses for tens of seconds)."""

    def __init__(self, work: Path, config: Path) -> None:
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        log = open(work / "nats-server.log", "wb")
        self._process = subprocess.Popen([nats_server_binary(), "-c", str(config), "-a", "127.0.0.1", "-p",
                                          str(self.port), "-js", "-sd", str(work / "store")],
                                         stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.pid = self._process.pid

    def wait(self, deadline_s: float = 600.0) -> None:
        begun = time.monotonic()
        while time.monotonic() - begun < deadline_s:
            if self._process.poll() is not None:
                sys.exit(f"nats-server exited with {self._process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        sys.exit("nats-server did not start")

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(60)


def started(work: Path, config: Path) -> tuple[Server, float]:
    begun = time.monotonic()
    server = Server(work, config)
    server.wait()
    return server, time.monotonic() - begun


def allow_list(nodes: list[str], work: Path) -> dict:
    begun = time.monotonic()
    permissions = users(NAMESPACE, CLUSTER, nodes)
    keys = {user: new_user_key() for user in permissions}
    config = work / "nats.conf"
    config.write_text(render_allow_list(permissions, {u: k[1] for u, k in keys.items()}, store_dir=""))
    issue_all_s = time.monotonic() - begun
    # the node agents' Secret held each node's user name and seed
    secret = sum(len(f"{n}.user{n}.seed") + len(topology_user(n)) + len(keys[topology_user(n)][0]) for n in nodes)
    server, start_s = started(work, config)
    try:
        rss = rss_mb(server.pid)
        begun = time.monotonic()
        joined = f"joined-{len(nodes)}"
        permissions[topology_user(joined)] = service_permissions("topology", namespace=NAMESPACE, cluster=CLUSTER,
                                                                 node=joined)
        keys[topology_user(joined)] = new_user_key()
        config.write_text(render_allow_list(permissions, {u: k[1] for u, k in keys.items()}, store_dir=""))
        os.kill(server.pid, signal.SIGHUP)  # nats-server --signal reload
        asyncio.run(first_connect(server.url, nkeys_seed_str=keys[topology_user(joined)][0],
                                  inbox_prefix=inbox_prefix_for(topology_user(joined))))
        admit_s = time.monotonic() - begun
        return {"config_kb": round(config.stat().st_size / 1024), "secret_kb": round(secret / 1024),
                "start_s": round(start_s, 2), "rss_mb": rss,
                "issue_all_s": round(issue_all_s, 2), "admit_s": round(admit_s, 3), "reload": True,
                "rss_after_admit_mb": rss_mb(server.pid)}
    finally:
        server.stop()


def operator_config(work: Path, now: int) -> tuple[Authority, Path]:
    authority = Authority.new()
    account = authority.public("account")
    accounts = {account: account_jwt(authority, "account", NAMESPACE, now),
                authority.public("system_account"): account_jwt(authority, "system_account", "SYS", now)}
    config = work / "nats.conf"
    config.write_text(render_server_config(operator=operator_jwt(authority, "tidal", now),
                                           system_account=authority.public("system_account"), accounts=accounts,
                                           store_dir=""))
    return authority, config


def operator_mode(nodes: list[str], work: Path) -> dict:
    begun, now = time.monotonic(), int(time.time())
    authority, config = operator_config(work, now)
    account = authority.public("account")
    secret = 0
    for user, granted in users(NAMESPACE, CLUSTER, nodes).items():
        creds = mint(authority.account_signing, account, user, granted, iat=now)  # what nats-config wrote per user
        if user.startswith("topology-"):  # tidal-bus-topology: <node>.user, <node>.seed, <node>.creds
            secret += len(creds.text()) + len(creds.seed) + len(user) + 3 * len(user.removeprefix("topology-")) + 16
    issue_all_s = time.monotonic() - begun
    server, start_s = started(work, config)
    try:
        rss = rss_mb(server.pid)
        begun = time.monotonic()
        joined = f"joined-{len(nodes)}"
        creds = mint(authority.account_signing, account, topology_user(joined),
                     service_permissions("topology", namespace=NAMESPACE, cluster=CLUSTER, node=joined), iat=now)
        creds_file = work / "joined.creds"
        creds_file.write_text(creds.text())
        asyncio.run(first_connect(server.url, user_credentials=str(creds_file),
                                  inbox_prefix=inbox_prefix_for(topology_user(joined))))
        admit_s = time.monotonic() - begun
        return {"config_kb": round(config.stat().st_size / 1024, 1), "secret_kb": round(secret / 1024),
                "start_s": round(start_s, 2), "rss_mb": rss,
                "issue_all_s": round(issue_all_s, 2), "admit_s": round(admit_s, 3), "reload": False,
                "rss_after_admit_mb": rss_mb(server.pid)}
    finally:
        server.stop()


def issued(nodes: list[str], work: Path) -> dict:
    """Today: nothing per node anywhere; a joining node asks the issuer."""
    begun, now = time.monotonic(), int(time.time())
    authority, config = operator_config(work, now)
    account = authority.public("account")
    central = users(NAMESPACE, CLUSTER, [])
    creds = {user: mint(authority.account_signing, account, user, granted, iat=now) for user, granted in
             central.items()}
    issue_all_s = time.monotonic() - begun
    # the Secrets `tidal nats-config --k8s-secrets` writes, none per node: the largest is a central
    # service's (user, seed, .creds), the bridge's; the others are the config, the signing key, the TLS pair
    secret = max([len(config.read_text()), *(len(user) + len(c.seed) + len(c.text()) for user, c in creds.items())])
    (work / "signing.nk").write_text(authority.account_signing)
    server, start_s = started(work, config)
    try:
        rss = rss_mb(server.pid)
        admit_s, per_s = asyncio.run(_admit_through_the_issuer(server.url, work, account, f"joined-{len(nodes)}"))
        return {"config_kb": round(config.stat().st_size / 1024, 1), "secret_kb": round(secret / 1024, 1),
                "start_s": round(start_s, 2), "rss_mb": rss, "issue_all_s": round(issue_all_s, 2),
                "admit_s": round(admit_s, 3), "issue_per_s": round(per_s), "reload": False,
                "rss_after_admit_mb": rss_mb(server.pid)}
    finally:
        server.stop()


async def _admit_through_the_issuer(url: str, work: Path, account: str, joined: str,
                                    requests: int = 200) -> tuple[float, float]:
    api = await KubeApiServer(record_requests=False).start()
    try:
        api.add_node(joined)
        api.add_pod("tidal-topology-x", "tidal-system", node=joined, spec={"serviceAccountName": "tidal-topology"})
        (work / "issuer-token").write_text("issuer")
        settings = CredentialsSettings(namespace=NAMESPACE, cluster=CLUSTER, http_host="127.0.0.1", http_port=0,
                                       signing_key_file=work / "signing.nk", account=account, kube_api_url=api.url,
                                       kube_token_file=work / "issuer-token", kube_ca_file=None)
        async with CredentialIssuer(settings) as issuer:
            token = work / "agent-token"
            token.write_text(api.mint_token("tidal-system", "tidal-topology", pod="tidal-topology-x",
                                            audiences=("tidal-bus",)))
            login = NodeLogin(issuer.url, token, work / "joined.creds")
            begun = time.monotonic()
            await login.obtain()
            await first_connect(url, user_credentials=str(login.creds_file), inbox_prefix=inbox_prefix_for(
                topology_user(joined)))
            admit_s = time.monotonic() - begun
            begun = time.monotonic()
            for _ in range(requests):
                await login.obtain()
            return admit_s, requests / (time.monotonic() - begun)
    finally:
        await api.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5_000, 20_000])
    args = parser.parse_args()
    print(json.dumps({"host": socket.gethostname(), "cpus": os.cpu_count()}))
    for count in args.nodes:
        nodes = [f"ip-10-{i // 65536}-{i // 256 % 256}-{i % 256}.ec2.internal" for i in range(count)]
        for name, measure in (("allow-list", allow_list), ("jwt", operator_mode), ("issued", issued)):
            with tempfile.TemporaryDirectory(prefix=f"nats-identity-{name}-") as work:
                print(json.dumps({"nodes": count, "mechanism": name, **measure(nodes, Path(work))}), flush=True)


if __name__ == "__main__":
    main()
