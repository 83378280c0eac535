"""NATS JWTs (decentralized authentication, JWT schema v2), encoded here:
the operator's, an account's and a user's claims, signed with nkeys, and
the `.creds` file a client logs in with.

A JWT is `base64url(header) . base64url(claims) . base64url(signature)`,
unpadded, with header `{"typ":"JWT","alg":"ed25519-nkey"}` and the Ed25519
signature of the first two parts by the issuer's seed. The claims are

    jti   base32 (unpadded) of SHA-512/256 over the claims without jti
          (what nats-io/jwt v2 computes; the server does not check it)
    iat   issued at, Unix seconds;  iss  the issuer's public key
    sub   the subject's public key; name a label
    nats  the role's fields, with type and version: 2

The server verifies the chain: the operator JWT it is configured with
signs each account JWT, and an account key (or a signing key the account
JWT lists) signs each user JWT. So admitting a user needs only the account
signing key, never the server's configuration.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from .nkey import InvalidSeed, Role, public_key, signing_key

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
MAX_CREDS_BYTES = 64 * 1024
UNLIMITED = -1


class InvalidCreds(ValueError):
    """Not a usable `.creds` file; the message says why, never the seed."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def claims_id(claims: Mapping[str, Any]) -> str:
    """The jti of `claims`: base32 of SHA-512/256 over their JSON without jti."""
    body = orjson.dumps({key: value for key, value in claims.items() if key != "jti"})
    return base64.b32encode(hashlib.new("sha512_256", body).digest()).decode().rstrip("=")


def encode(claims: Mapping[str, Any], issuer_seed: str, issuer_role: Role) -> str:
    """The JWT of `claims` (iss set to the issuer's public key, jti
    computed), signed by `issuer_seed`, a seed of `issuer_role`."""
    signer = signing_key(issuer_seed, issuer_role)
    full = {**claims, "iss": public_key(issuer_seed, issuer_role)}
    full = {"jti": claims_id(full), **full}
    signed = f"{_b64(orjson.dumps(_HEADER))}.{_b64(orjson.dumps(full))}"
    return f"{signed}.{_b64(signer.sign(signed.encode()).signature)}"


def decode_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, not verified (the server verifies); ValueError
    when it is not three base64url parts with JSON claims."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise ValueError("a JWT has three parts")
    try:
        claims = orjson.loads(_unb64(parts[1]))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise ValueError("the JWT's claims are not base64url JSON") from None
    if not isinstance(claims, dict):
        raise ValueError("the JWT's claims are not an object")
    return claims


def same_claims(token: str | None, claims: Mapping[str, Any]) -> bool:
    """Whether `token` already states `claims` (iss included; its iat and
    jti aside): re-issuing it would change only the time, so a re-run can
    keep it."""
    if not token:
        return False
    try:
        held = decode_claims(token)
    except ValueError:
        return False
    return {k: v for k, v in held.items() if k not in ("iat", "jti")} == dict(claims)


def operator_claims(operator: str, system_account: str, *, name: str, iat: int) -> dict[str, Any]:
    """The operator's self-signed claims, naming the system account."""
    return {"iat": iat, "name": name, "sub": operator,
            "nats": {"system_account": system_account, "type": "operator", "version": 2}}


def account_claims(account: str, *, name: str, iat: int, signing_keys: tuple[str, ...] = (),
                   jetstream: bool = True, revocations: Mapping[str, int] | None = None) -> dict[str, Any]:
    """An account's claims (signed by the operator): no limits besides the
    users' own permissions, JetStream on when `jetstream` (unlimited
    storage, streams and consumers), the keys allowed to sign its users,
    and revoked users (public key -> JWTs issued up to that second refused)."""
    limits: dict[str, Any] = {"subs": UNLIMITED, "data": UNLIMITED, "payload": UNLIMITED,
                              "imports": UNLIMITED, "exports": UNLIMITED, "wildcards": True,
                              "conn": UNLIMITED, "leaf": UNLIMITED}
    if jetstream:
        limits.update(mem_storage=UNLIMITED, disk_storage=UNLIMITED, streams=UNLIMITED, consumer=UNLIMITED)
    nats: dict[str, Any] = {"limits": limits, "default_permissions": {"pub": {}, "sub": {}}}
    if signing_keys:
        nats["signing_keys"] = list(signing_keys)
    if revocations:
        nats["revocations"] = dict(sorted(revocations.items()))
    nats.update(type="account", version=2)
    return {"iat": iat, "name": name, "sub": account, "nats": nats}


def user_claims(user: str, *, name: str, iat: int, publish: tuple[str, ...], subscribe: tuple[str, ...],
                issuer_account: str | None = None, exp: int | None = None) -> dict[str, Any]:
    """A user's claims: it may publish to `publish` and subscribe to
    `subscribe` only (everything else denied). `issuer_account` names the
    account when a signing key, not the account's own key, signs them;
    `exp` (Unix seconds) is when the server stops admitting it and closes
    the connections that logged in with it."""
    nats: dict[str, Any] = {"pub": {"allow": list(publish)}, "sub": {"allow": list(subscribe)},
                            "subs": UNLIMITED, "data": UNLIMITED, "payload": UNLIMITED}
    if issuer_account:
        nats["issuer_account"] = issuer_account
    nats.update(type="user", version=2)
    return {**({"exp": exp} if exp is not None else {}), "iat": iat, "name": name, "sub": user, "nats": nats}


@dataclass(frozen=True)
class Creds:
    """A `.creds` file's content: the user JWT and the user's seed."""

    jwt: str
    seed: str

    @property
    def name(self) -> str:
        """The user's name in its JWT (Tidal names its reply inbox after it)."""
        return str(decode_claims(self.jwt).get("name") or "")

    def text(self) -> str:
        """The file as nats-py and the nats CLI read it."""
        return ("-----BEGIN NATS USER JWT-----\n" f"{self.jwt}\n" "------END NATS USER JWT------\n\n"
                "************************* IMPORTANT *************************\n"
                "NKEY Seed printed below can be used to sign and prove identity.\n"
                "NKEYs are sensitive and should be treated as secrets.\n\n"
                "-----BEGIN USER NKEY SEED-----\n" f"{self.seed}\n" "------END USER NKEY SEED------\n\n"
                "*************************************************************\n")


def parse_creds(text: str) -> Creds:
    """The JWT and seed of a `.creds` file; InvalidCreds when either block
    is missing, the JWT is not a user's, or the seed is not a user seed
    (nats-py would loop forever on a file without the JWT block)."""
    def block(name: str) -> str:
        begin = text.find(f"-----BEGIN {name}-----")
        if begin < 0:
            raise InvalidCreds(f"no '{name}' block (not a .creds file)")
        lines = text[begin:].splitlines()
        if len(lines) < 2 or not lines[1].strip():
            raise InvalidCreds(f"the '{name}' block is empty")
        return lines[1].strip()

    creds = Creds(jwt=block("NATS USER JWT"), seed=block("USER NKEY SEED"))
    try:
        claims = decode_claims(creds.jwt)
    except ValueError as exc:
        raise InvalidCreds(f"the user JWT is unreadable: {exc}") from None
    if not isinstance(claims.get("nats"), dict) or claims["nats"].get("type") != "user":
        raise InvalidCreds("the JWT is not a user's")
    try:
        own = public_key(creds.seed, "user")
    except InvalidSeed as exc:
        raise InvalidCreds(str(exc)) from None
    if claims.get("sub") != own:
        raise InvalidCreds("the seed is not the key the JWT was issued to")
    return creds
