"""Tidal's event bus: one async interface over NATS JetStream and Kafka."""

from .api import Backend, GroupSubscription, RawMessage, StartAt
from .bus import MAX_EVENT_BYTES, Bus, backend_from_url
from .consumer import Consumer, Delivery, Handler, RetryPolicy, SeenIds
from .errors import BusConfigError, BusError, HandlerError

__all__ = [
    "MAX_EVENT_BYTES", "Backend", "Bus", "BusConfigError", "BusError", "Consumer", "Delivery",
    "GroupSubscription", "Handler", "HandlerError", "RawMessage", "RetryPolicy", "SeenIds",
    "StartAt", "backend_from_url",
]
