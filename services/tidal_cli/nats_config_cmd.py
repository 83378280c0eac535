"""`tidal nats-config`: a nats-server configuration with one user per
service (and per node agent), each allowed only its own subjects, plus the
credentials those users log in with.

    tidal nats-config --namespace tidal --cluster prod --nodes node-a,node-b \\
        --out nats.conf [--credentials-dir DIR] [--k8s-secrets secrets.yaml]

Passwords are random (32 bytes) per user, generated on the first run and
kept in DIR (`<user>.password`, mode 0600): a re-run for a new node keeps
every existing password. The server config holds only bcrypt hashes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import secrets
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from tidal_bus.nats_permissions import ADMIN, render_server_config, topology_user, users

from .errors import CliError
from .files import read_bounded
from .options import cluster_name, make_dir, namespace_name, write_file

_NODE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # a Kubernetes node name
BCRYPT_COST = 11
MIN_COST = 4  # bcrypt's minimum


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "nats-config", help="nats-server config with per-service users and permissions",
        description="Writes a nats-server config (JetStream on, one user per service and per node agent, "
                    "each allowed only the subjects it publishes and the consumers it reads) and the "
                    "passwords of those users. Re-run it when nodes join: existing passwords are kept.")
    parser.add_argument("--namespace", type=namespace_name, default=os.environ.get("TIDAL_NAMESPACE", "tidal"))
    parser.add_argument("--cluster", type=cluster_name, required=True,
                        help="the cluster id (TIDAL_CLUSTER of the services)")
    nodes = parser.add_mutually_exclusive_group(required=True)
    nodes.add_argument("--nodes", help="comma-separated node names, one agent user each")
    nodes.add_argument("--nodes-file", type=Path, help="node names, one per line or comma-separated (thousands "
                       "of nodes do not fit on a command line)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the server config")
    parser.add_argument("--credentials-dir", type=Path,
                        help="passwords, one <user>.password file each (default: OUT.credentials/)")
    parser.add_argument("--k8s-secrets", type=Path,
                        help="also write the Kubernetes Secrets (server config and per-service credentials)")
    parser.add_argument("--store-dir", default="/data", help="JetStream store directory of the server")
    parser.add_argument("--tls-cert", help="server certificate file (turns TLS on)")
    parser.add_argument("--tls-key", help="server key file")
    parser.add_argument("--tls-ca", help="CA file; with --tls-verify, clients must present a certificate")
    parser.add_argument("--tls-verify", action="store_true", help="require client certificates")
    parser.set_defaults(func=run)


def parse_nodes(text: str) -> list[str]:
    """The node names of `--nodes`, each checked as a Kubernetes node name."""
    nodes = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in nodes if not _NODE.match(n)]
    if bad or not nodes:
        raise CliError(f"--nodes: {bad[0]!r} is not a node name" if bad else "--nodes: give at least one node")
    return list(dict.fromkeys(nodes))


def hash_password(password: str, cost: int = BCRYPT_COST) -> str:
    """A bcrypt hash nats-server accepts: with the `bcrypt` package when
    installed, else the C library's crypt(3) (Python ≤ 3.12)."""
    try:
        import bcrypt

        return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()
    except ImportError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            raise CliError("hashing passwords needs the 'bcrypt' package", exit_code=1) from None
    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2 ** cost))
    if not hashed or not hashed.startswith("$2"):
        raise CliError("this system's crypt(3) has no bcrypt: install the 'bcrypt' package", exit_code=1)
    return hashed


MAX_PASSWORD_BYTES = 4096


def load_or_make_passwords(directory: Path, names: list[str]) -> tuple[dict[str, str], set[str]]:
    """Each user's password from `directory`, generating (and saving, mode
    0600) those that are missing; also which ones were generated now."""
    make_dir(directory, "--credentials-dir")
    found, made = {}, set()
    for name in names:
        path = directory / f"{name}.password"
        try:
            with open(path, "rb") as handle:
                text = handle.read(MAX_PASSWORD_BYTES + 1)
        except FileNotFoundError:
            found[name] = secrets.token_urlsafe(32)
            made.add(name)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(found[name] + "\n")
            except OSError as exc:
                raise CliError(f"--credentials-dir {directory}: cannot write {path.name}: {exc.strerror}") from None
            continue
        except OSError as exc:
            raise CliError(f"--credentials-dir {directory}: cannot read {path.name}: {exc.strerror}") from None
        password = text.decode(errors="replace").strip()
        if len(text) > MAX_PASSWORD_BYTES or not password:
            raise CliError(f"--credentials-dir {directory}: {path.name} must hold one password of at most "
                           f"{MAX_PASSWORD_BYTES} bytes")
        found[name] = password
    return found, made


HASHES_FILE = "hashes.json"
"""Beside the passwords (so it tells nothing they do not): per user, the
SHA-256 of the password and its bcrypt hash, so a re-run hashes only new or
changed passwords."""


def password_hashes(directory: Path, passwords: dict[str, str], generated: set[str]) -> tuple[dict[str, str], int]:
    """A bcrypt hash per user, reusing `directory`'s cache for unchanged
    passwords; the number of passwords hashed now.

    Cost: a password this command generated is 32 random bytes (256 bits):
    no work factor makes guessing it feasible or not, so it is hashed at
    bcrypt's minimum cost (the hash only keeps the password out of the
    server's config). Any other password (written by an operator) gets
    BCRYPT_COST. At 20,000 nodes that is seconds instead of most of an hour."""
    cache_path = directory / HASHES_FILE
    try:
        cache = json.loads(read_bounded(cache_path, 64 << 20)) if cache_path.exists() else {}
    except (CliError, ValueError):
        cache = {}  # unreadable: rebuilt below
    cache = cache if isinstance(cache, dict) else {}
    hashes: dict[str, str] = {}
    fresh: dict[str, dict] = {}
    todo: dict[str, tuple[str, int]] = {}
    for user, password in passwords.items():
        digest = hashlib.sha256(password.encode()).hexdigest()
        entry = cache.get(user) if isinstance(cache.get(user), dict) else {}
        unchanged = entry.get("sha256") == digest
        fresh[user] = {"sha256": digest, "generated": user in generated or (unchanged and entry.get("generated") is True)}
        if unchanged and isinstance(entry.get("bcrypt"), str):
            hashes[user] = entry["bcrypt"]
        else:
            todo[user] = (password, MIN_COST if fresh[user]["generated"] else BCRYPT_COST)
    # bcrypt releases the GIL: hash on every core
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for user, hashed in zip(todo, pool.map(lambda item: hash_password(*item), todo.values())):
            hashes[user] = hashed
    for user, entry in fresh.items():
        entry["bcrypt"] = hashes[user]
    write_file(cache_path, json.dumps(fresh), "--credentials-dir", mode=0o600)
    return hashes, len(todo)


def k8s_secrets(server_config: str, passwords: dict[str, str], nodes: list[str], namespace: str = "tidal-system"
                ) -> str:
    """The Secrets the NATS overlay mounts: `nats-config` (the server config),
    `tidal-bus-<service>` (user, password) and `tidal-bus-topology`
    (`<node>.user` and `<node>.password` per node, each agent mounting only
    its own node's two keys)."""
    def secret(name: str, data: dict[str, str]) -> dict:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "tidal"}},
                "stringData": data}

    docs = [secret("nats-config", {"nats.conf": server_config})]
    for user, password in passwords.items():
        if not user.startswith("topology-"):
            docs.append(secret(f"tidal-bus-{user}", {"user": user, "password": password}))
    docs.append(secret("tidal-bus-topology", {f"{node}.{what}": value for node in nodes for what, value in
                                              (("user", topology_user(node)), ("password",
                                                                               passwords[topology_user(node)]))}))
    return yaml.safe_dump_all(docs, sort_keys=False)


def run(args: argparse.Namespace) -> int:
    namespace, cluster = args.namespace, args.cluster  # checked by their argument types
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_verify and not args.tls_ca):
        raise CliError("TLS needs --tls-cert and --tls-key together, and --tls-verify needs --tls-ca")
    nodes = parse_nodes(args.nodes if args.nodes is not None else
                        read_bounded(args.nodes_file).decode(errors="replace").replace("\n", ","))
    permissions = users(namespace, cluster, nodes)
    credentials = args.credentials_dir or args.out.with_name(args.out.name + ".credentials")
    make_dir(args.out.parent, "--out")
    passwords, generated = load_or_make_passwords(credentials, list(permissions))
    hashes, hashed = password_hashes(credentials, passwords, generated)
    tls = None
    if args.tls_cert:
        tls = {"cert_file": args.tls_cert, "key_file": args.tls_key, "timeout": 2}
        if args.tls_ca:
            tls.update(ca_file=args.tls_ca, verify=bool(args.tls_verify))
    header = (f"nats-server config for Tidal namespace {namespace!r}, cluster {cluster!r}, written by\n"
              f"`tidal nats-config`. Users: {_user_summary(permissions)}. Re-run it (not edit) when nodes\n"
              "change, then reload the server (nats-server --signal reload).")
    config = render_server_config(permissions, hashes, header=header, store_dir=args.store_dir, tls=tls)
    write_file(args.out, config, "--out")
    print(f"wrote {args.out} ({len(permissions)} users, {hashed} password(s) hashed now) and their passwords in "
          f"{credentials}/")
    if args.k8s_secrets:
        write_file(args.k8s_secrets, k8s_secrets(config, passwords, nodes), "--k8s-secrets", mode=0o600)
        print(f"wrote {args.k8s_secrets}: kubectl apply -f {args.k8s_secrets} before kubectl apply -k "
              f"k8s/overlays/nats ({ADMIN} password for the CLI: {credentials / (ADMIN + '.password')})")
    return 0


def _user_summary(permissions: dict) -> str:
    agents = [user for user in permissions if user.startswith("topology-")]
    others = [user for user in permissions if not user.startswith("topology-")]
    return ", ".join(others) + f" and {len(agents)} node agent(s) (topology-<node>)"
