"""NATS nkeys: Ed25519 key pairs, the seed (`S…`, the secret that signs)
and its public key, whose first letter names the role: `O` an operator,
`A` an account, `U` a user.

A user signs the server's nonce with its seed; an operator signs account
JWTs and an account (or its signing key) signs user JWTs (see nats_jwt).
Making a key costs microseconds, so `tidal nats-config` makes one per user
and keeps it across runs.
"""

from __future__ import annotations

import base64
import binascii
from typing import Literal

import nacl.signing
import nkeys

MAX_SEED_BYTES = 4096
Role = Literal["operator", "account", "user"]
_PREFIX: dict[str, int] = {"operator": nkeys.PREFIX_BYTE_OPERATOR, "account": nkeys.PREFIX_BYTE_ACCOUNT,
                           "user": nkeys.PREFIX_BYTE_USER}


class InvalidSeed(ValueError):
    """Not an nkey seed of the expected role; the message says why, never
    the text itself."""


def _seed_header(role: Role) -> bytes:
    """A seed's first two bytes: the seed prefix, then the role (see nkeys.encode_seed)."""
    prefix = _PREFIX[role]
    return bytes([nkeys.PREFIX_BYTE_SEED | prefix >> 5, (31 & prefix) << 3])


def new_key(role: Role = "user") -> tuple[str, str]:
    """A fresh random key of `role`: (seed `S<role>…`, public key)."""
    signing = nacl.signing.SigningKey.generate()
    return _encode(_seed_header(role), bytes(signing)), _public_key(signing, role)


def new_user_key() -> tuple[str, str]:
    """A fresh random user key: (seed `SU…`, public key `U…`)."""
    return new_key("user")


def new_user_seed() -> str:
    """A fresh random user seed, `SU…` (58 characters)."""
    return new_key("user")[0]


def signing_key(seed: str | bytes, role: Role = "user") -> nacl.signing.SigningKey:
    """The Ed25519 key of a seed of `role` (surrounding whitespace ignored);
    InvalidSeed when it is not one (another role's seed, a public key, a
    wrong checksum, not base32). nkeys does not check the checksum; this does."""
    text = (seed.encode() if isinstance(seed, str) else bytes(seed)).strip()
    header = _seed_header(role)
    not_a_seed = InvalidSeed(f"not an nkey {role} seed (one line starting with S{role[0].upper()})")
    if not text.startswith(b"S" + role[0].upper().encode()):
        raise not_a_seed
    try:
        decoded = base64.b32decode(text + b"=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        raise not_a_seed from None
    found, raw, checksum = decoded[:2], decoded[2:-2], decoded[-2:]
    if found != header or len(raw) != 32:
        raise not_a_seed
    if nkeys.crc16_checksum(found + raw) != checksum:
        raise InvalidSeed("the nkey seed's checksum does not match (mistyped or truncated?)")
    return nacl.signing.SigningKey(raw)


def public_key(seed: str | bytes, role: Role = "user") -> str:
    """The public key of a seed of `role` (`U…` for a user); InvalidSeed
    when it is not one."""
    return _public_key(signing_key(seed, role), role)


def user_public_key(seed: str | bytes) -> str:
    """The public key `U…` of a user seed; InvalidSeed when it is not one."""
    return public_key(seed, "user")


def _public_key(signing: nacl.signing.SigningKey, role: Role) -> str:
    return _encode(bytes([_PREFIX[role]]), bytes(signing.verify_key))


def _encode(header: bytes, raw: bytes) -> str:
    """nkeys' text form: base32 of header, key and CRC-16, unpadded."""
    data = header + raw
    return base64.b32encode(data + nkeys.crc16_checksum(data)).decode().rstrip("=")
