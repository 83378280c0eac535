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
import os
import re
import secrets
import warnings
from pathlib import Path

import yaml

from tidal_bus.nats_permissions import ADMIN, render_server_config, topology_user, users
from tidal_bus.subjects import check_namespace

from .errors import CliError

_NODE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # a Kubernetes node name
BCRYPT_COST = 11


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "nats-config", help="nats-server config with per-service users and permissions",
        description="Writes a nats-server config (JetStream on, one user per service and per node agent, "
                    "each allowed only the subjects it publishes and the consumers it reads) and the "
                    "passwords of those users. Re-run it when nodes join: existing passwords are kept.")
    parser.add_argument("--namespace", default=os.environ.get("TIDAL_NAMESPACE", "tidal"))
    parser.add_argument("--cluster", required=True, help="the cluster id (TIDAL_CLUSTER of the services)")
    parser.add_argument("--nodes", required=True, help="comma-separated node names, one agent user each")
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


def load_or_make_passwords(directory: Path, names: list[str]) -> dict[str, str]:
    """Each user's password from `directory`, generating (and saving, mode
    0600) those that are missing."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    found = {}
    for name in names:
        path = directory / f"{name}.password"
        if path.exists():
            found[name] = path.read_text().strip()
        else:
            found[name] = secrets.token_urlsafe(32)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(found[name] + "\n")
    return found


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
    try:
        namespace = check_namespace(args.namespace)
    except ValueError as exc:
        raise CliError(f"--namespace: {exc}") from None
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,63}", args.cluster):
        raise CliError(f"--cluster {args.cluster!r}: letters, digits, '_' or '-' (as TIDAL_CLUSTER)")
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_verify and not args.tls_ca):
        raise CliError("TLS needs --tls-cert and --tls-key together, and --tls-verify needs --tls-ca")
    nodes = parse_nodes(args.nodes)
    permissions = users(namespace, args.cluster, nodes)
    credentials = args.credentials_dir or args.out.with_name(args.out.name + ".credentials")
    passwords = load_or_make_passwords(credentials, list(permissions))
    hashes = {user: hash_password(password) for user, password in passwords.items()}
    tls = None
    if args.tls_cert:
        tls = {"cert_file": args.tls_cert, "key_file": args.tls_key, "timeout": 2}
        if args.tls_ca:
            tls.update(ca_file=args.tls_ca, verify=bool(args.tls_verify))
    header = (f"nats-server config for Tidal namespace {namespace!r}, cluster {args.cluster!r}, written by\n"
              f"`tidal nats-config`. Users: {', '.join(permissions)}. Re-run it (not edit) when nodes change,\n"
              "then reload the server (nats-server --signal reload).")
    config = render_server_config(permissions, hashes, header=header, store_dir=args.store_dir, tls=tls)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(config)
    print(f"wrote {args.out} ({len(permissions)} users) and their passwords in {credentials}/")
    if args.k8s_secrets:
        fd = os.open(args.k8s_secrets, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(k8s_secrets(config, passwords, nodes))
        print(f"wrote {args.k8s_secrets}: kubectl apply -f {args.k8s_secrets} before kubectl apply -k "
              f"k8s/overlays/nats ({ADMIN} password for the CLI: {credentials / (ADMIN + '.password')})")
    return 0
