"""`tidal nats-creds`: the `.creds` file of one node agent (or service),
minted with the account signing key alone: no server configuration, no
reload. What a node that joins needs.

    tidal nats-creds --namespace tidal --cluster prod --node ip-10-0-0-9 \\
        --signing-key DIR/account-signing.nk --account "$(cat DIR/account.pub)" --out node.creds

The user JWT carries exactly the permissions `tidal nats-config` gives that
user (nats_permissions); the key in the file is new unless `--seed-file`
gives the user's own.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from tidal_clock import wall_clock
from tidal_bus.nats_identity import mint
from tidal_bus.nats_permissions import ACCESS, ADMIN, CENTRAL, admin_permissions, service_permissions, topology_user

from .errors import CliError
from .nats_config_cmd import parse_nodes, read_seed
from .options import cluster_name, namespace_name, write_file

_ACCOUNT = re.compile(r"^A[A-Z2-7]{55}$")  # an nkey account public key


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "nats-creds", help="mint one node agent's (or service's) NATS credentials with the account signing key",
        description="Writes a .creds file (user JWT + nkey seed) for one node agent or service, signed by the "
                    "account signing key `tidal nats-config` made. The server needs nothing new.")
    parser.add_argument("--namespace", type=namespace_name, default=os.environ.get("TIDAL_NAMESPACE", "tidal"))
    parser.add_argument("--cluster", type=cluster_name, required=True)
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--node", help="the node whose agent the credentials are for")
    who.add_argument("--service", choices=[*CENTRAL, ADMIN], help="a central service (or the admin)")
    parser.add_argument("--signing-key", type=Path, required=True,
                        help="the account signing key's seed file (account-signing.nk)")
    parser.add_argument("--account", required=True, help="the account's public key (account.pub, A…)")
    parser.add_argument("--seed-file", type=Path, help="the user's own nkey seed (default: a new key)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the .creds file (mode 0600)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    account = args.account.strip()
    if not _ACCOUNT.match(account):
        raise CliError("--account: not an account public key (56 characters starting with A)")
    signing = read_seed(args.signing_key, "account", "--signing-key")
    if signing is None:
        raise CliError(f"--signing-key {args.signing_key}: no such file")
    seed = read_seed(args.seed_file, "user", "--seed-file") if args.seed_file else None
    if args.seed_file and seed is None:
        raise CliError(f"--seed-file {args.seed_file}: no such file")
    if args.node is not None:
        (node,) = parse_nodes(args.node)
        user = topology_user(node)
        granted = service_permissions("topology", namespace=args.namespace, cluster=args.cluster, node=node)
    elif args.service == ADMIN:
        user, granted = ADMIN, admin_permissions(args.namespace)
    else:
        assert args.service in ACCESS
        user, granted = args.service, service_permissions(args.service, namespace=args.namespace,
                                                          cluster=args.cluster)
    creds = mint(signing, account, user, granted, iat=int(wall_clock()), user_seed=seed)
    write_file(args.out, creds.text(), "--out", mode=0o600)
    print(f"wrote {args.out}: {user}, {len(granted.publish)} publish and {len(granted.subscribe)} subscribe "
          f"subject(s), signed for account {account}")
    return 0
