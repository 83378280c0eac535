"""What the bus accepts off the wire and onto it: the size limit, and the
checks a message passes before a handler sees it.

A message is refused, with a reason that goes into its dead letter, when it
is larger than MAX_EVENT_BYTES (another producer, a Kafka broker or a NATS
server configured for bigger payloads let it through: it is never parsed),
when it does not decode as an event, or when it is an event of another
type than its stream carries (each stream holds one event type), or when
it does not speak for whom it was published as.

Identity: the broker grants a producer its subjects (a node agent may publish
only under its own node's key and its cluster, see nats_permissions), and the
subject carries that key and cluster. An event counts only when the
subject's key and cluster, the envelope's key and cluster and the payload's
own key (`event_key()`: the node of a node event) all agree; the schema
checks the last pair, `accept` the rest. Event ids are scoped the same way
(`dedupe_key`): an id published under node-a's key can never suppress an
event under node-b's, at the broker or in a consumer.
"""

from __future__ import annotations

from typing import Any

from tidal_schemas import Envelope, SchemaError, decode
from tidal_schemas.errors import IdentityError
from tidal_schemas.streams import lane_of

from .errors import BusError

MAX_EVENT_BYTES = 1 << 20
"""Largest event, in bytes of JSON, published or handled: NATS' default
max_payload. Producers get EventTooLarge above it; consumers dead-letter
what arrives above it."""


class EventTooLarge(BusError):
    """An event over the size limit (ours, or the broker's): retrying the
    same bytes cannot help."""

    retriable = False


def check_size(size: int, where: str, limit: int = MAX_EVENT_BYTES) -> None:
    """EventTooLarge, naming `where`, the size and the limit, when `size`
    bytes exceed `limit`."""
    if size > limit:
        raise EventTooLarge(f"{where}: {size} bytes is over the {limit}-byte limit")


def accept(data: bytes, stream: str, *, key: str | None = None, cluster: str | None = None,
           lane: str | None = None) -> Envelope[Any]:
    """The event in `data` as read from `stream` under the subject's `key`
    and `cluster` (None: not known, not checked) and in its side `lane`
    (None: the main lane); SchemaError whose message is the dead-letter
    reason otherwise (`oversized: …`, `undecodable: …`, `wrong stream: …`,
    `identity: …`). An event of the main lane sent in the side lane would
    be hidden from the readers of the main lane: refused. One of the side
    lane in the main lane hides nothing (and is how events were sent before
    there were lanes): accepted."""
    if len(data) > MAX_EVENT_BYTES:
        raise SchemaError(f"oversized: {len(data)} bytes > {MAX_EVENT_BYTES}-byte limit")
    try:
        envelope = decode(data)
    except IdentityError:
        raise
    except SchemaError as exc:
        raise SchemaError(f"undecodable: {exc}") from None
    if envelope.type != stream:
        raise SchemaError(f"wrong stream: a {envelope.type} event on stream {stream}")
    if key is not None and envelope.key != key:
        raise IdentityError(f"identity: published under key {key[:80]!r} but the event is about "
                          f"{envelope.key[:80]!r}")
    if cluster is not None and envelope.cluster != cluster:
        raise IdentityError(f"identity: published in cluster {cluster[:63]!r} but the event says "
                          f"{envelope.cluster[:63]!r}")
    if lane is not None and lane != lane_of(envelope.payload):
        raise IdentityError(f"identity: published in the {lane[:40]!r} lane of {stream}, where this "
                          f"{envelope.type} event does not go")
    return envelope


def dedupe_key(cluster: str, key: str, event_id: str) -> str:
    """What makes an event a duplicate: its id *under its publisher's
    cluster and key*. The broker's duplicate window (NATS `Nats-Msg-Id`) and
    the consumers' memory of handled ids both use it, so an id cannot be
    squatted from another key's subject. The separator cannot occur in a
    cluster name."""
    return f"{cluster}/{key}/{event_id}"
