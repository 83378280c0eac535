"""`tidal nats-config`: a nats-server configuration in operator mode (NATS
decentralized authentication) and the credentials of every Tidal user.

    tidal nats-config --namespace tidal --cluster prod --nodes node-a,node-b \\
        --out nats.conf [--credentials-dir DIR] [--k8s-secrets secrets.yaml]

The server configuration holds the operator JWT, the system account and a
MEMORY resolver preloaded with the deployment's account JWT: no user, so it
does not grow with nodes, and a node that joins needs no reload. Each
central service and the admin get a `.creds` file: a user JWT with exactly
its permissions (nats_permissions), signed by the account's signing key,
and its nkey seed. Node agents get theirs at run time from the credential
issuer (`python -m tidal_credentials`, which holds the signing key) with
their ServiceAccount token: no Secret holds anything per node. Off
Kubernetes, `--nodes` (or `tidal nats-creds --node`) mints node agents'
`.creds` files into DIR, never into a Secret.

Every key is made on the first run and kept in DIR (`*.nk`, mode 0600), and
a JWT is re-issued only when what it says changes, so a re-run rewrites
nothing. A node no longer listed keeps its files but is revoked in the
account JWT (that changes the configuration: reload the server).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from tidal_clock import wall_clock
from tidal_bus.nats_identity import SYSTEM_ACCOUNT_NAME, Authority, account_jwt, mint, operator_jwt, \
    render_server_config
from tidal_bus.nats_jwt import MAX_CREDS_BYTES, Creds, InvalidCreds, decode_claims, parse_creds
from tidal_bus.nats_permissions import ADMIN, users
from tidal_bus.nkey import MAX_SEED_BYTES, InvalidSeed, Role, new_key, new_user_key, public_key
from tidal_bus.node_issuer import AGENT_NAMESPACE

from .errors import CliError
from .files import read_bounded
from .options import cluster_name, make_dir, namespace_name, write_file

if TYPE_CHECKING:
    from .webhook_tls import WebhookTls

_NODE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # a Kubernetes node name
SEED_SUFFIX, CREDS_SUFFIX = ".nk", ".creds"
# Authority seeds, by Authority field: they sign the JWTs, never log in.
AUTHORITY_FILES = {"operator": "operator.nk", "system_account": "system-account.nk", "account": "account.nk",
                   "account_signing": "account-signing.nk"}
ACCOUNT_PUBLIC_FILE = "account.pub"
NODE_NAMESPACE = AGENT_NAMESPACE  # where k8s/ runs the node agent DaemonSet (tests/test_manifests_credentials.py)
_OLD_PASSWORDS = ("*.password", "hashes.json")  # what runs before nkeys left in the directory


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "nats-config", help="nats-server config (operator mode) and per-service credentials",
        description="Writes a nats-server config in operator mode (JetStream on, the operator JWT, a resolver "
                    "with the account JWT; no user listed) and one .creds file per central service, a user JWT "
                    "allowed only the subjects it publishes and the consumers it reads. Node agents get theirs "
                    "at run time from the credential issuer (python -m tidal_credentials); --nodes makes theirs "
                    "ahead, off Kubernetes. Re-running keeps every key.")
    parser.add_argument("--namespace", type=namespace_name, default=os.environ.get("TIDAL_NAMESPACE", "tidal"))
    parser.add_argument("--cluster", type=cluster_name, required=True,
                        help="the cluster id (TIDAL_CLUSTER of the services)")
    nodes = parser.add_mutually_exclusive_group()
    nodes.add_argument("--nodes", help="off Kubernetes only: comma-separated node names, a .creds file each in "
                       "DIR (on Kubernetes the agents get theirs from the credential issuer)")
    nodes.add_argument("--nodes-file", type=Path, help="the same, one name per line or comma-separated")
    parser.add_argument("--out", type=Path, required=True, help="where to write the server config")
    parser.add_argument("--credentials-dir", type=Path,
                        help="keys and credentials: <user>.nk, <user>.creds, the operator's and account's "
                             "seeds and JWTs (default: OUT.credentials/)")
    parser.add_argument("--k8s-secrets", type=Path,
                        help="also write the Kubernetes Secrets (server config, per-service credentials, "
                             "the account signing key the credential issuer holds); none per node")
    parser.add_argument("--node-namespace", default=NODE_NAMESPACE, help="with --k8s-secrets: the node agents' "
                        "namespace, where the issuer's CA goes (Secret tidal-credentials-ca)")
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


def read_seed(path: Path, role: Role, option: str) -> str | None:
    """The seed of `role` in `path`, None when there is no such file;
    CliError naming the file (never the text) when it is not one."""
    try:
        with open(path, "rb") as handle:
            seed = handle.read(MAX_SEED_BYTES + 1).decode(errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CliError(f"{option} {path.parent}: cannot read {path.name}: {exc.strerror}") from None
    try:
        public_key(seed, role)
    except InvalidSeed as exc:
        raise CliError(f"{option} {path.parent}: {path.name}: {exc} (delete it to issue a new key)") from None
    return seed


def load_or_make_seeds(directory: Path, names: list[str]) -> tuple[dict[str, str], int]:
    """Each user's nkey seed (`<user>.nk` in `directory`), making and saving
    (mode 0600, never overwriting) one for each user that has none; also
    how many were made now. A re-run keeps every user's identity."""
    make_dir(directory, "--credentials-dir")
    seeds, made = {}, 0
    for name in names:
        path = directory / f"{name}{SEED_SUFFIX}"
        seed = read_seed(path, "user", "--credentials-dir")
        if seed is None:
            seed, made = new_user_key()[0], made + 1
            write_new(path, seed + "\n", "--credentials-dir")
        seeds[name] = seed
    return seeds, made


def load_or_make_authority(directory: Path) -> Authority:
    """The operator's and accounts' seeds in `directory`, each made (and
    saved, mode 0600) when missing."""
    seeds = {}
    for field, name in AUTHORITY_FILES.items():
        role: Role = "operator" if field == "operator" else "account"
        seeds[field] = read_seed(directory / name, role, "--credentials-dir")
        if seeds[field] is None:
            seeds[field] = new_key(role)[0]
            write_new(directory / name, seeds[field] + "\n", "--credentials-dir")
    return Authority(**seeds)


def write_new(path: Path, text: str, option: str) -> None:
    """Write a new secret file (mode 0600), never overwriting one."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise CliError(f"{option} {path.parent}: cannot write {path.name}: {exc.strerror}") from None


def read_creds(path: Path) -> Creds | None:
    """The credentials in `path`, None when missing or unusable (re-minted)."""
    try:
        return parse_creds(read_bounded(path, MAX_CREDS_BYTES).decode(errors="replace"))
    except (OSError, CliError, InvalidCreds):
        return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def revoked_users(directory: Path, listed: set[str]) -> dict[str, int]:
    """The node agents with credentials in `directory` that are no longer
    listed: public key -> the time their JWT was issued (it, and any older
    one, is refused)."""
    found = {}
    for path in directory.glob(f"topology-*{CREDS_SUFFIX}"):
        if path.name.removesuffix(CREDS_SUFFIX) not in listed and (creds := read_creds(path)) is not None:
            claims = decode_claims(creds.jwt)
            found[claims["sub"]] = int(claims.get("iat", 0))
    return found


def k8s_secrets(server_config: str, seeds: dict[str, str], namespace: str = "tidal-system", *,
                creds: dict[str, Creds] | None = None, authority: Authority | None = None,
                issuer: "WebhookTls | None" = None, node_namespace: str = NODE_NAMESPACE) -> str:
    """The Secrets the NATS overlay mounts, each the same size whatever the
    number of nodes: `nats-config` (the server config), `tidal-bus-<service>`
    (user, seed, and `creds` when given) for each central service and the
    admin and, with the authority, `tidal-nats-account-signing` (`seed`,
    `account`: what the credential issuer signs node agents' JWTs with) and,
    with `issuer`, its serving certificate `tidal-credentials-tls` and, in
    the node agents' namespace `node_namespace`, `tidal-credentials-ca`
    with only its CA (`ca.crt`), which the agents verify it with. Nothing
    per node: agents ask the issuer. The operator's and the account's own
    seeds are in no Secret: they stay offline."""
    def secret(name: str, data: dict[str, str]) -> dict:
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "tidal"}},
                "stringData": data}

    def keys(user: str) -> dict[str, str]:
        found = {"user": user, "seed": seeds[user]}
        if creds is not None:
            found["creds"] = creds[user].text()
        return found

    docs = [secret("nats-config", {"nats.conf": server_config})]
    docs += [secret(f"tidal-bus-{user}", keys(user)) for user in seeds if not user.startswith("topology-")]
    if authority is not None:
        docs.append(secret("tidal-nats-account-signing", {"seed": authority.account_signing,
                                                          "account": authority.public("account")}))
    if issuer is not None:
        from .issuer_tls import ISSUER_SECRET, ca_secret
        from .webhook_tls import secret_manifest  # cryptography: only when Secrets are written
        docs += [secret_manifest(issuer, ISSUER_SECRET, namespace), ca_secret(issuer, node_namespace)]
    return yaml.safe_dump_all(docs, sort_keys=False)


def run(args: argparse.Namespace) -> int:
    namespace, cluster = args.namespace, args.cluster  # checked by their argument types
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_verify and not args.tls_ca):
        raise CliError("TLS needs --tls-cert and --tls-key together, and --tls-verify needs --tls-ca")
    listed = args.nodes is not None or args.nodes_file is not None
    nodes = parse_nodes(args.nodes if args.nodes is not None else
                        read_bounded(args.nodes_file).decode(errors="replace").replace("\n", ",")) if listed else []
    permissions = users(namespace, cluster, nodes)
    credentials = args.credentials_dir or args.out.with_name(args.out.name + ".credentials")
    make_dir(args.out.parent, "--out")
    seeds, made = load_or_make_seeds(credentials, list(permissions))
    authority = load_or_make_authority(credentials)
    now, account = int(wall_clock()), authority.public("account")
    creds, minted = {}, 0
    for user, granted in permissions.items():
        path = credentials / f"{user}{CREDS_SUFFIX}"
        previous = read_creds(path)
        creds[user] = mint(authority.account_signing, account, user, granted, iat=now, user_seed=seeds[user],
                           previous=previous)
        if creds[user] is not previous:
            minted += 1
            write_file(path, creds[user].text(), "--credentials-dir", mode=0o600)
    # node agents with .creds in DIR but not listed are revoked: without a list, every one made ahead (an
    # upgrade from per-node Secrets: those JWTs never expire), since the issuer now grants node agents theirs
    revoked = revoked_users(credentials, set(permissions))
    jwts = {"operator.jwt": operator_jwt(authority, f"tidal-{namespace}", now,
                                         _read_text(credentials / "operator.jwt")),
            "account.jwt": account_jwt(authority, "account", namespace, now, revocations=revoked,
                                       previous=_read_text(credentials / "account.jwt")),
            "system-account.jwt": account_jwt(authority, "system_account", SYSTEM_ACCOUNT_NAME, now,
                                              previous=_read_text(credentials / "system-account.jwt"))}
    for name, token in {**jwts, ACCOUNT_PUBLIC_FILE: account}.items():
        write_file(credentials / name, token + "\n", "--credentials-dir")
    tls = None
    if args.tls_cert:
        tls = {"cert_file": args.tls_cert, "key_file": args.tls_key, "timeout": 2}
        if args.tls_ca:
            tls.update(ca_file=args.tls_ca, verify=bool(args.tls_verify))
    header = (f"nats-server config for Tidal namespace {namespace!r}, cluster {cluster!r}, written by\n"
              "`tidal nats-config`: operator mode. No user is listed here: each logs in with a user JWT\n"
              f"the account {account} signed (`tidal nats-creds`),\n"
              f"carrying its own permissions. Revoked node agents: {len(revoked)}.")
    config = render_server_config(operator=jwts["operator.jwt"], system_account=authority.public("system_account"),
                                  accounts={account: jwts["account.jwt"],
                                            authority.public("system_account"): jwts["system-account.jwt"]},
                                  header=header, store_dir=args.store_dir, tls=tls)
    write_file(args.out, config, "--out")
    print(f"wrote {args.out} ({len(config) // 1024 + 1} KiB, whatever the number of nodes) and {len(permissions)} "
          f"users' credentials in {credentials}/ ({made} new key(s), {len(permissions) - made} kept; "
          f"{minted} JWT(s) issued; {len(revoked)} node(s) revoked)")
    old = sorted({p.name for pattern in _OLD_PASSWORDS for p in credentials.glob(pattern)})
    if old:
        print(f"note: {len(old)} password file(s) of an earlier run in {credentials}/ are no longer used (users log "
              "in with their .creds file now): re-apply the Secrets, then delete them")
    if args.k8s_secrets:
        from .issuer_tls import issuer_tls
        write_file(args.k8s_secrets, k8s_secrets(config, seeds, creds=creds, authority=authority,
                                                 issuer=issuer_tls(credentials), node_namespace=args.node_namespace),
                   "--k8s-secrets", mode=0o600)
        print(f"wrote {args.k8s_secrets}: kubectl apply -f {args.k8s_secrets} before kubectl apply -k "
              f"k8s/overlays/nats (the CLI as {ADMIN}: TIDAL_BUS_CREDS_FILE={credentials / (ADMIN + CREDS_SUFFIX)})")
    return 0
