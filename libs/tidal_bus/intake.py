"""What the bus accepts off the wire and onto it: the size limit, and the
checks a message passes before a handler sees it.

A message is refused, with a reason that goes into its dead letter, when it
is larger than MAX_EVENT_BYTES (another producer, a Kafka broker or a NATS
server configured for bigger payloads let it through: it is never parsed),
when it does not decode as an event, or when it is an event of another
type than its stream carries (each stream holds one event type).
"""

from __future__ import annotations

from typing import Any

from tidal_schemas import Envelope, SchemaError, decode

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


def accept(data: bytes, stream: str) -> Envelope[Any]:
    """The event in `data` as read from `stream`; SchemaError whose message
    is the dead-letter reason otherwise (`oversized: …`, `undecodable: …`,
    `wrong stream: …`)."""
    if len(data) > MAX_EVENT_BYTES:
        raise SchemaError(f"oversized: {len(data)} bytes > {MAX_EVENT_BYTES}-byte limit")
    try:
        envelope = decode(data)
    except SchemaError as exc:
        raise SchemaError(f"undecodable: {exc}") from None
    if envelope.type != stream:
        raise SchemaError(f"wrong stream: a {envelope.type} event on stream {stream}")
    return envelope
