"""The server configuration `tidal nats-config` wrote before issue 52: one
nkey user per service and per node agent, each with its allow-lists. Kept
for bench/nats_identity.py to measure beside operator mode; nothing in
Tidal writes it any more."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from tidal_bus.nats_permissions import Permissions


def render_allow_list(permissions: Mapping[str, Permissions], public_keys: Mapping[str, str], *,
                      store_dir: str | None = "/data") -> str:
    """JetStream on and only the given users, each its public key `U…`
    with its publish and subscribe allow-lists (JSON: valid nats-server
    syntax)."""
    entries = [{"nkey": public_keys[user],
                "permissions": {"publish": {"allow": list(p.publish)}, "subscribe": {"allow": list(p.subscribe)}}}
               for user, p in permissions.items()]
    config = {"jetstream": {"store_dir": store_dir} if store_dir else {}, "authorization": {"users": entries}}
    return orjson.dumps(config, option=orjson.OPT_INDENT_2).decode() + "\n"
