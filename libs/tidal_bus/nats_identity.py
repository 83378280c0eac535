"""Tidal's NATS identities, decentralized: one operator, one account for the
deployment (plus the system account), and a user JWT per service and per
node agent carrying that user's permissions (nats_permissions).

The server's configuration holds the operator JWT, the system account and
a MEMORY resolver preloaded with the two account JWTs: a few kilobytes,
whatever the number of nodes. A node that joins needs a user JWT signed by
the account's signing key (`mint`), nothing on the server: no
regenerated configuration, no reload. The operator's and the account's own
seeds sign only account JWTs and can stay offline; the signing key admits
users and can be rotated by re-issuing the account JWT.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass

from . import nats_jwt
from .nats_jwt import Creds
from .nats_permissions import Permissions
from .nkey import Role, new_key, public_key

SYSTEM_ACCOUNT_NAME = "SYS"
MAX_CONTROL_LINE = 65536


@dataclass(frozen=True)
class Authority:
    """The seeds that issue a deployment's JWTs: the operator's (signs the
    accounts), the system account's, the deployment account's own and its
    signing key's (signs the users)."""

    operator: str
    system_account: str
    account: str
    account_signing: str

    @classmethod
    def new(cls) -> "Authority":
        return cls(operator=new_key("operator")[0], system_account=new_key("account")[0],
                   account=new_key("account")[0], account_signing=new_key("account")[0])

    def public(self, which: str) -> str:
        """The public key of one of the four seeds (`operator`, `account`, …)."""
        return public_key(getattr(self, which), "operator" if which == "operator" else "account")


def operator_jwt(authority: Authority, name: str, iat: int, previous: str | None = None) -> str:
    """The operator's self-signed JWT naming the system account (`previous`
    kept when it says the same)."""
    claims = nats_jwt.operator_claims(authority.public("operator"), authority.public("system_account"),
                                      name=name, iat=iat)
    return _kept_or_issued(claims, previous, authority.operator, "operator")


def account_jwt(authority: Authority, which: str, name: str, iat: int, *, previous: str | None = None,
                revocations: Mapping[str, int] | None = None) -> str:
    """An account's JWT signed by the operator: the deployment account
    (`which="account"`: JetStream on, users signed by its signing key,
    `revocations` refused) or the system account."""
    deployment = which == "account"
    claims = nats_jwt.account_claims(
        authority.public(which), name=name, iat=iat, jetstream=deployment,
        signing_keys=(authority.public("account_signing"),) if deployment else (),
        revocations=revocations if deployment else None)
    return _kept_or_issued(claims, previous, authority.operator, "operator")


def mint(signing_seed: str, account: str, name: str, permissions: Permissions, *, iat: int,
         user_seed: str | None = None, previous: Creds | None = None) -> Creds:
    """A user's credentials: its JWT (name, exactly `permissions`) signed by
    the account signing key `signing_seed` on behalf of `account`, and its
    seed (`user_seed`, or a new key). `previous` is kept when it grants the
    same to the same key, so a re-run changes no file."""
    seed = user_seed or (previous.seed if previous else None) or new_key("user")[0]
    claims = nats_jwt.user_claims(public_key(seed, "user"), name=name, iat=iat, publish=permissions.publish,
                                  subscribe=permissions.subscribe, issuer_account=account)
    expected = {**_timeless(claims), "iss": _signer(signing_seed)}
    if previous is not None and previous.seed == seed and nats_jwt.same_claims(previous.jwt, expected):
        return previous
    return Creds(jwt=nats_jwt.encode(claims, signing_seed, "account"), seed=seed)


@functools.lru_cache(maxsize=4)
def _signer(signing_seed: str) -> str:
    """The signing key's public key, derived once per run, not once per user."""
    return public_key(signing_seed, "account")


def _kept_or_issued(claims: dict, previous: str | None, issuer_seed: str, issuer_role: Role) -> str:
    if nats_jwt.same_claims(previous, {**_timeless(claims), "iss": public_key(issuer_seed, issuer_role)}):
        assert previous is not None
        return previous
    return nats_jwt.encode(claims, issuer_seed, issuer_role)


def _timeless(claims: dict) -> dict:
    return {k: v for k, v in claims.items() if k != "iat"}


def render_server_config(*, operator: str, system_account: str, accounts: Mapping[str, str], header: str = "",
                         store_dir: str | None = "/data", tls: Mapping[str, object] | None = None) -> str:
    """A nats-server configuration in operator mode: the operator JWT, the
    system account, and a MEMORY resolver preloaded with `accounts`
    (public key -> account JWT). No user is listed: the server admits any
    user whose JWT an account's key signed, with that JWT's permissions.
    JetStream fsyncs every write before its ack."""
    preload = "".join(f"  {key}: {jwt}\n" for key, jwt in accounts.items())
    store = f"  store_dir: {json.dumps(store_dir)}\n" if store_dir else ""
    lines = [
        "".join(f"# {line}\n" for line in header.splitlines()),
        f"operator: {operator}\n",
        f"system_account: {system_account}\n",
        "resolver: MEMORY\n",
        "# A client's CONNECT carries its user JWT: up to about 17 KB (the bridge's\n"
        "# permissions), over the default limit of 4 KB.\n",
        f"max_control_line: {MAX_CONTROL_LINE}\n",
        f"resolver_preload: {{\n{preload}}}\n",
        "jetstream {\n", store,
        "  # fsync every write before it is acknowledged. Under the default (every\n"
        "  # 2 minutes) Jepsen (NATS 2.12.1, December 2025) lost acknowledged writes\n"
        "  # when a minority of servers crashed: a server can come back without\n"
        "  # what it acked and still count towards the next quorum.\n",
        "  sync_interval: always\n",
        "}\n",
    ]
    if tls:
        lines.append(f"tls: {json.dumps(dict(tls))}\n")
    return "".join(lines)
