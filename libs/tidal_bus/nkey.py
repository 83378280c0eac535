"""NATS nkeys of Tidal's bus users: Ed25519 key pairs, the seed (`SU…`, the
secret a client signs the server's nonce with) and its public key (`U…`,
the only thing the server's config holds).

A leaked server config therefore gives away no credential, and making a key
costs microseconds where a bcrypt hash costs milliseconds: `tidal
nats-config` makes one per user and keeps it across runs.
"""

from __future__ import annotations

import base64
import binascii

import nacl.signing
import nkeys

MAX_SEED_BYTES = 4096
# A user seed's first two bytes: the seed prefix, then the user role (see nkeys.encode_seed).
_SEED_HEADER = bytes([nkeys.PREFIX_BYTE_SEED | nkeys.PREFIX_BYTE_USER >> 5, (31 & nkeys.PREFIX_BYTE_USER) << 3])


class InvalidSeed(ValueError):
    """Not an nkey user seed; the message says why, never the text itself."""


def new_user_key() -> tuple[str, str]:
    """A fresh random user key: (seed `SU…`, public key `U…`)."""
    signing = nacl.signing.SigningKey.generate()
    return _encode(_SEED_HEADER, bytes(signing)), _public_key(signing)


def new_user_seed() -> str:
    """A fresh random user seed, `SU…` (58 characters)."""
    return new_user_key()[0]


def user_public_key(seed: str | bytes) -> str:
    """The public key `U…` of a user seed (surrounding whitespace ignored);
    InvalidSeed when it is not one (another role's seed, a public key, a
    wrong checksum, not base32). The same as nkeys' `from_seed(…).public_key`,
    with the checksum checked (nkeys does not) and the seed decoded once."""
    text = (seed.encode() if isinstance(seed, str) else bytes(seed)).strip()
    not_a_seed = InvalidSeed("not an nkey user seed (one line starting with SU)")
    if not text.startswith(b"SU"):
        raise not_a_seed
    try:
        decoded = base64.b32decode(text + b"=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        raise not_a_seed from None
    header, raw, checksum = decoded[:2], decoded[2:-2], decoded[-2:]
    if header != _SEED_HEADER or len(raw) != 32:
        raise not_a_seed
    if nkeys.crc16_checksum(header + raw) != checksum:
        raise InvalidSeed("the nkey seed's checksum does not match (mistyped or truncated?)")
    return _public_key(nacl.signing.SigningKey(raw))


def _public_key(signing: nacl.signing.SigningKey) -> str:
    return _encode(bytes([nkeys.PREFIX_BYTE_USER]), bytes(signing.verify_key))


def _encode(header: bytes, raw: bytes) -> str:
    """nkeys' text form: base32 of header, key and CRC-16, unpadded."""
    data = header + raw
    return base64.b32encode(data + nkeys.crc16_checksum(data)).decode().rstrip("=")
