"""Tidal's event bus: one async interface over NATS JetStream and Kafka."""

from . import _lean_nats  # noqa: F401  (first: nats without aiohttp)
from .api import Backend, GroupSubscription, RawMessage, StartAt
from .backends import BUS_BACKENDS, backend_from_url, options_for
from .bus import Bus
from .consumer import Consumer, Delivery, Handler, RetryPolicy
from .seen_ids import SeenIds
from .errors import BusConfigError, BusError, HandlerError
from .intake import MAX_EVENT_BYTES, EventTooLarge
from .output_window import defer

__all__ = [
    "MAX_EVENT_BYTES", "Backend", "Bus", "BusConfigError", "BusError", "Consumer", "Delivery", "EventTooLarge",
    "GroupSubscription", "Handler", "HandlerError", "RawMessage", "RetryPolicy", "SeenIds",
    "StartAt", "backend_from_url", "BUS_BACKENDS", "defer", "options_for",
]
