"""The envelope every event travels in, and the registry of event types.

An event on the wire is one JSON object::

    {"id": ..., "type": "node.metrics", "version": 1, "cluster": "prod-eu",
     "key": "node-17", "time": "...", "source": "topology",
     "causation_id": null, "payload": {...}}

`type` picks the payload model from the registry; `version` lets a model
evolve (a consumer rejects versions newer than it knows). Unknown fields are
ignored so that older consumers keep working when producers add fields.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

import orjson
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, ValidationError
from pydantic_core import PydanticSerializationError

from tidal_clock import now_utc

from .errors import IdentityError, SchemaError, one_line

_EVENT_ID_NAMESPACE = uuid.UUID("3b0b8a8e-6c1f-4d55-9a55-7c1d8f3c9e10")
_NAMESPACE_BYTES = _EVENT_ID_NAMESPACE.bytes


class Payload(BaseModel):
    """Base of every event payload: a versioned, immutable record.

    Subclasses set TYPE (also the stream it is published on) and VERSION,
    and implement `event_key` (what the event is partitioned by). Floats
    are finite, as in `Record`.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    def event_key(self) -> str:
        raise NotImplementedError

    def in_side_lane(self) -> bool:
        """Whether the event travels in its stream's side lane
        (`StreamSpec.side_lane`), which readers may leave out."""
        return False


P = TypeVar("P", bound=Payload)


class Envelope(BaseModel, Generic[P]):
    """Identity, routing and lineage of one event around its payload."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str = Field(min_length=1, max_length=128)
    type: str = Field(min_length=1)
    version: StrictInt = Field(ge=1)  # "99" or true are typos, not versions
    cluster: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9_-]+$")
    key: str = Field(min_length=1, max_length=512)
    time: AwareDatetime
    source: str = Field(min_length=1)
    causation_id: str | None = None
    payload: P


_REGISTRY: dict[str, type[Payload]] = {}


def register(model: type[P]) -> type[P]:
    """Class decorator: make `model` decodable by its TYPE."""
    if not model.TYPE:
        raise TypeError(f"{model.__name__} has no TYPE")
    if model.TYPE in _REGISTRY and _REGISTRY[model.TYPE] is not model:
        raise TypeError(f"event type {model.TYPE!r} registered twice")
    _REGISTRY[model.TYPE] = model
    return model


def event_types() -> dict[str, type[Payload]]:
    """All registered event types, by type name, in a stable order."""
    return dict(sorted(_REGISTRY.items()))


def payload_model(event_type: str) -> type[Payload]:
    """The payload model for `event_type`; SchemaError when unknown."""
    try:
        return _REGISTRY[event_type]
    except KeyError:
        raise SchemaError(f"unknown event type {event_type!r}") from None


def derived_id(causation_id: str, event_type: str, key: str, discriminator: str = "") -> str:
    """A deterministic event id for an event caused by another one.

    Re-handling the same cause yields the same id, so a redelivered input
    produces an output that consumers (and NATS' duplicate window) drop.
    """
    # uuid.uuid5's value, spelled out: through UUID objects it cost 10 us, and every output pays it
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + f"{causation_id}/{event_type}/{key}/{discriminator}".encode(),
                                    usedforsecurity=False).digest()[:16])
    digest[6] = digest[6] & 0x0F | 0x50  # version 5
    digest[8] = digest[8] & 0x3F | 0x80  # RFC 4122 variant
    x = digest.hex()
    return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


def make_envelope(
    payload: P,
    *,
    cluster: str,
    source: str,
    cause: Envelope[Any] | None = None,
    event_id: str | None = None,
    time: datetime | None = None,
    discriminator: str = "",
) -> Envelope[P]:
    """Wrap `payload`. With a `cause` and no explicit id, the id is derived
    from the cause so the same cause always yields the same event id."""
    key = payload.event_key()
    causation_id = cause.id if cause is not None else None
    if event_id is None:
        event_id = (
            derived_id(causation_id, payload.TYPE, key, discriminator)
            if causation_id
            else str(uuid.uuid4())
        )
    return envelope_of(type(payload))(
        id=event_id,
        type=payload.TYPE,
        version=payload.VERSION,
        cluster=cluster,
        key=key,
        time=time or now_utc(),
        source=source,
        causation_id=causation_id,
        payload=payload,
    )


_ENVELOPE_TYPES: dict[type, type[Envelope[Any]]] = {}


def envelope_of(model: type[BaseModel]) -> type[Envelope[Any]]:
    """`Envelope[model]`, made once. pydantic keeps parametrised models only
    weakly: a collected one is rebuilt (a schema build, milliseconds) on the
    next event of its type, and even a hit costs microseconds per event."""
    envelope = _ENVELOPE_TYPES.get(model)
    if envelope is None:
        envelope = _ENVELOPE_TYPES[model] = Envelope[model]  # type: ignore[valid-type]
    return envelope


def encode(envelope: Envelope[Any]) -> bytes:
    """Serialise an envelope to compact JSON bytes; SchemaError when some
    text cannot be written as JSON (a lone surrogate from a YAML escape)."""
    # pydantic's own JSON writer: the same bytes as orjson over `model_dump(mode="json")`, in
    # half the time (a 64-decision event: 2.4 µs a decision against 4.5), with no dict between
    try:
        return envelope.model_dump_json().encode()
    except PydanticSerializationError as exc:
        raise SchemaError(f"event {envelope.type} {envelope.id} cannot be written as JSON: {one_line(str(exc))}") \
            from None


def decode(data: bytes | str) -> Envelope[Any]:
    """Parse and validate one event; SchemaError with a precise reason otherwise."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SchemaError(f"not JSON: {exc}") from None
    return _validate(raw)


def decode_obj(raw: Any) -> Envelope[Any]:
    """Validate an already-parsed object (from JSON or YAML) as an event.
    YAML can hold what JSON cannot, so the event must also encode: what is
    accepted here can be published."""
    envelope = _validate(raw)
    encode(envelope)
    return envelope


def _validate(raw: Any) -> Envelope[Any]:
    if not isinstance(raw, dict):
        raise SchemaError(f"an event must be a JSON object, got {type(raw).__name__}")
    event_type = raw.get("type")
    if not isinstance(event_type, str):
        raise SchemaError("field 'type': missing or not a string")
    model = payload_model(event_type)
    version = raw.get("version")
    # Before the payload's fields, whose errors would hide that it is a newer
    # event. Only an integer is a version: "99", 99.0 or true fail below.
    if type(version) is int and version > model.VERSION:
        raise SchemaError(
            f"event type {event_type!r} version {version} is newer than the supported {model.VERSION}"
        )
    try:
        envelope = envelope_of(model).model_validate(raw)
    except ValidationError as exc:
        raise SchemaError(describe_validation_error(exc)) from None
    # The key routes the event (subject, partition) and the payload says whom
    # it is about: the two must be one, or a producer allowed only node-a's
    # key could speak for node-b (see tidal_bus.intake).
    about = envelope.payload.event_key()
    if envelope.key != about:
        raise IdentityError(f"identity: envelope key {envelope.key[:80]!r} but the payload is about {about[:80]!r}")
    return envelope


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming the first offending field, e.g. `payload.cpu_milli: ...`.
    Keys in the path come from the input, so each is cut short and the whole
    is kept to one line."""
    errors = exc.errors()
    first = errors[0]
    where = ".".join(one_line(str(part), 60) for part in first["loc"]) or "<root>"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return one_line(f"field '{where}': {first['msg']}{more}")
