"""`tidal nats-config`: a nats-server configuration with one user per
service (and per node agent), each allowed only its own subjects, plus the
nkey seeds those users log in with.

    tidal nats-config --namespace tidal --cluster prod --nodes node-a,node-b \\
        --out nats.conf [--credentials-dir DIR] [--k8s-secrets secrets.yaml]

Each user is an nkey (Ed25519): its seed is made on the first run and kept
in DIR (`<user>.nk`, mode 0600), so a re-run keeps every identity and makes
keys only for new users; the server config holds only public keys (no
secret, and nothing to hash: 20,000 nodes take seconds). Users no longer
listed (removed nodes) are left out of the config, so the server refuses
them; their seed files stay in DIR.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import yaml

from tidal_bus.nats_permissions import ADMIN, render_server_config, topology_user, users
from tidal_bus.nkey import MAX_SEED_BYTES, InvalidSeed, new_user_key, user_public_key

from .errors import CliError
from .files import read_bounded
from .options import cluster_name, make_dir, namespace_name, write_file

_NODE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # a Kubernetes node name


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "nats-config", help="nats-server config with per-service users and permissions",
        description="Writes a nats-server config (JetStream on, one user per service and per node agent, "
                    "each allowed only the subjects it publishes and the consumers it reads) and the "
                    "nkey seeds of those users. Re-run it when nodes join or leave: existing keys are kept.")
    parser.add_argument("--namespace", type=namespace_name, default=os.environ.get("TIDAL_NAMESPACE", "tidal"))
    parser.add_argument("--cluster", type=cluster_name, required=True,
                        help="the cluster id (TIDAL_CLUSTER of the services)")
    nodes = parser.add_mutually_exclusive_group(required=True)
    nodes.add_argument("--nodes", help="comma-separated node names, one agent user each")
    nodes.add_argument("--nodes-file", type=Path, help="node names, one per line or comma-separated (thousands "
                       "of nodes do not fit on a command line)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the server config")
    parser.add_argument("--credentials-dir", type=Path,
                        help="nkey seeds, one <user>.nk file each (default: OUT.credentials/)")
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


SEED_SUFFIX = ".nk"
_OLD_PASSWORDS = ("*.password", "hashes.json")  # what runs before nkeys left in the directory


def load_or_make_seeds(directory: Path, names: list[str]) -> tuple[dict[str, str], dict[str, str], int]:
    """Each user's nkey seed (`<user>.nk` in `directory`) and public key,
    making and saving (mode 0600, never overwriting) a seed for each user
    that has none; also how many were made now. A re-run thus keeps every
    existing user's identity and adds keys only for new users."""
    make_dir(directory, "--credentials-dir")
    seeds, public, made = {}, {}, 0
    for name in names:
        path = directory / f"{name}{SEED_SUFFIX}"
        try:
            with open(path, "rb") as handle:
                text = handle.read(MAX_SEED_BYTES + 1)
        except FileNotFoundError:
            (seeds[name], public[name]), made = new_user_key(), made + 1
            _write_new(path, seeds[name] + "\n", directory)
            continue
        except OSError as exc:
            raise CliError(f"--credentials-dir {directory}: cannot read {path.name}: {exc.strerror}") from None
        seeds[name] = text.decode(errors="replace").strip()
        try:
            public[name] = user_public_key(seeds[name])
        except InvalidSeed as exc:
            raise CliError(f"--credentials-dir {directory}: {path.name}: {exc} (delete it to issue a new key)"
                           ) from None
    return seeds, public, made


def _write_new(path: Path, text: str, directory: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise CliError(f"--credentials-dir {directory}: cannot write {path.name}: {exc.strerror}") from None


def k8s_secrets(server_config: str, seeds: dict[str, str], nodes: list[str], namespace: str = "tidal-system") -> str:
    """The Secrets the NATS overlay mounts: `nats-config` (the server config),
    `tidal-bus-<service>` (user, seed) and `tidal-bus-topology` (`<node>.user`
    and `<node>.seed` per node, each agent mounting only its own node's two
    keys). The user only names the reply inbox; the seed is the identity."""
    def secret(name: str, data: dict[str, str]) -> dict:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "tidal"}},
                "stringData": data}

    docs = [secret("nats-config", {"nats.conf": server_config})]
    for user, seed in seeds.items():
        if not user.startswith("topology-"):
            docs.append(secret(f"tidal-bus-{user}", {"user": user, "seed": seed}))
    docs.append(secret("tidal-bus-topology", {f"{node}.{what}": value for node in nodes for what, value in
                                              (("user", topology_user(node)), ("seed", seeds[topology_user(node)]))}))
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
    seeds, public_keys, made = load_or_make_seeds(credentials, list(permissions))
    tls = None
    if args.tls_cert:
        tls = {"cert_file": args.tls_cert, "key_file": args.tls_key, "timeout": 2}
        if args.tls_ca:
            tls.update(ca_file=args.tls_ca, verify=bool(args.tls_verify))
    header = (f"nats-server config for Tidal namespace {namespace!r}, cluster {cluster!r}, written by\n"
              f"`tidal nats-config`. Users: {_user_summary(permissions)}.\n"
              "Each user is an nkey: its public key here, its seed in the credentials directory.\n"
              "Re-run it (not edit) when nodes change, then reload the server (nats-server --signal reload).")
    config = render_server_config(permissions, public_keys, header=header, store_dir=args.store_dir, tls=tls)
    write_file(args.out, config, "--out")
    print(f"wrote {args.out} ({len(permissions)} users: {made} new key(s), {len(permissions) - made} kept) and their "
          f"nkey seeds in {credentials}/")
    old = sorted({p.name for pattern in _OLD_PASSWORDS for p in credentials.glob(pattern)})
    if old:
        print(f"note: {len(old)} password file(s) of an earlier run in {credentials}/ are no longer used (users log "
              "in with their nkey seed now): re-apply the Secrets, then delete them")
    if args.k8s_secrets:
        write_file(args.k8s_secrets, k8s_secrets(config, seeds, nodes), "--k8s-secrets", mode=0o600)
        print(f"wrote {args.k8s_secrets}: kubectl apply -f {args.k8s_secrets} before kubectl apply -k "
              f"k8s/overlays/nats (the CLI as {ADMIN}: TIDAL_BUS_USER={ADMIN} "
              f"TIDAL_BUS_NKEY_SEED_FILE={credentials / (ADMIN + SEED_SUFFIX)})")
    return 0


def _user_summary(permissions: dict) -> str:
    agents = [user for user in permissions if user.startswith("topology-")]
    others = [user for user in permissions if not user.startswith("topology-")]
    return ", ".join(others) + f" and {len(agents)} node agent(s) (topology-<node>)"
