"""NATS nkeys of Tidal's bus users: Ed25519 key pairs, the seed (`SU…`, the
secret a client signs the server's nonce with) and its public key (`U…`,
the only thing the server's config holds).

A leaked server config therefore gives away no credential, and making a key
costs microseconds where a bcrypt hash costs milliseconds: `tidal
nats-config` makes one per user and keeps it across runs.
"""

from __future__ import annotations

import nacl.signing
import nkeys

MAX_SEED_BYTES = 4096


class InvalidSeed(ValueError):
    """Not an nkey user seed; the message says why, never the text itself."""


def new_user_seed() -> str:
    """A fresh random user seed, `SU…` (58 characters)."""
    raw = bytes(nacl.signing.SigningKey.generate())
    return nkeys.encode_seed(raw, nkeys.PREFIX_BYTE_USER).decode()


def user_public_key(seed: str | bytes) -> str:
    """The public key `U…` of a user seed (surrounding whitespace ignored);
    InvalidSeed when it is not one (another role's seed, a public key, a
    wrong checksum, not base32)."""
    text = (seed.encode() if isinstance(seed, str) else bytes(seed)).strip()
    not_a_seed = InvalidSeed("not an nkey user seed (one line starting with SU)")
    if not text.startswith(b"SU"):
        raise not_a_seed
    try:
        prefix, raw = nkeys.decode_seed(bytearray(text))
    except (nkeys.NkeysError, ValueError):
        raise not_a_seed from None
    if prefix != nkeys.PREFIX_BYTE_USER or len(raw) != 32:
        raise not_a_seed
    # decode_seed ignores the checksum: a mistyped seed must not pass
    if nkeys.encode_seed(bytes(raw), prefix) != text:
        raise InvalidSeed("the nkey seed's checksum does not match (mistyped or truncated?)")
    pair = nkeys.from_seed(bytearray(text))
    try:
        return pair.public_key.decode()
    finally:
        pair.wipe()
