"""Events a process publishes and then reads back itself: placement reads
its own decisions from the decision log (the log's order decides, and a
replica learns its peers' decisions there). Decoding them again cost
placement some 13 µs a decision over the bus, for an envelope it already
held: the one it encoded. It is kept by its bytes until read.

Only bytes equal to those published are taken from memory, and only under
the subject they were published to (its key and cluster): a copy under
another key's subject is decoded, and refused, as any other input."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tidal_schemas import Envelope
from tidal_schemas.streams import lane_of

from .api import RawMessage

KEPT_BYTES = 4 << 20  # past this, the oldest not yet read back are forgotten (and decoded when read)


class ReadBack:
    """The envelopes of `streams` this process published and has not read
    back yet, by their bytes."""

    def __init__(self, streams: Iterable[str] = ()) -> None:
        self.streams = set(streams)
        self._kept: dict[bytes, Envelope[Any]] = {}
        self._bytes = 0

    def published(self, envelope: Envelope[Any], data: bytes) -> None:
        if envelope.type not in self.streams or data in self._kept:
            return
        self._kept[data] = envelope
        self._bytes += len(data)
        while self._bytes > KEPT_BYTES:
            oldest = next(iter(self._kept))
            del self._kept[oldest]
            self._bytes -= len(oldest)

    def taken(self, raw: RawMessage, stream: str) -> Envelope[Any] | None:
        """The envelope published as `raw`'s bytes on `stream`, under its
        subject's key and cluster (a cluster not known is not checked, as
        `intake.accept` does); None when it is not one of ours, or was read
        back already."""
        if stream not in self.streams or not isinstance(raw.data, bytes):
            return None
        envelope = self._kept.pop(raw.data, None)
        if envelope is None:
            return None
        self._bytes -= len(raw.data)
        if envelope.type != stream or raw.key != envelope.key or raw.lane != lane_of(envelope.payload) \
                or (raw.cluster is not None and raw.cluster != envelope.cluster):
            return None  # our bytes where we did not put them: decoded, and refused, as any input
        return envelope
