"""`tidal events tail STREAM` and `tidal events publish FILE`."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import yaml

from tidal_bus import StartAt
from tidal_schemas import Envelope, SchemaError, decode_obj, make_envelope, payload_model
from tidal_schemas.envelope import describe_validation_error, envelope_of
from tidal_schemas.streams import STREAMS
from tidal_schemas.strict import unknown_field

from .errors import CliError
from .files import check_publishable, read_items
from .options import add_bus_options, bus_for, count
from .output import add_output_option, emit_item


def add(subparsers) -> None:
    parser = subparsers.add_parser("events", help="read and write event streams")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="{tail,publish}")

    tail = verbs.add_parser("tail", help="print a stream's events", description="print a stream's events")
    tail.add_argument("stream", help=f"one of: {', '.join(STREAMS)}")
    tail.add_argument("--from", dest="start", default="latest",
                      help="earliest, latest (default), an ISO time (2026-01-01T00:00:00Z) or a sequence")
    tail.add_argument("--limit", type=count, default=0, help="stop after this many events (0 = no limit)")
    tail.add_argument("--no-follow", action="store_true", help="stop at the end of the stream")
    add_output_option(tail)
    add_bus_options(tail)
    tail.set_defaults(func=run_tail)

    publish = verbs.add_parser(
        "publish", help="validate a file of events, then publish them",
        description="FILE (JSON or YAML) holds one event or a list. Each is a full envelope, or the short "
                    "form {type, payload[, cluster]}. Every event is validated before any is published.")
    publish.add_argument("file", type=Path)
    add_bus_options(publish)
    publish.set_defaults(func=run_publish)


def load_events(path: Path, default_cluster: str, source: str = "cli") -> list[Envelope[Any]]:
    """Read and validate every event of a file; CliError naming the first problem."""
    items = read_items(path, "events")
    events = []
    for number, item in enumerate(items, 1):
        where = f"{path}: event {number}" if len(items) > 1 else str(path)
        try:
            events.append(_one_event(item, default_cluster, source))
        except SchemaError as exc:
            raise CliError(f"{where}: {exc}") from None
        check_publishable(events[-1], where)
    return events


SHORT_FORM = ("type", "payload", "cluster")


def _one_event(item: Any, default_cluster: str, source: str) -> Envelope[Any]:
    if not isinstance(item, dict):
        raise SchemaError(f"an event must be a mapping, got {type(item).__name__}")
    if not isinstance(item.get("type"), str):
        raise SchemaError("field 'type': missing or not a string")
    model = payload_model(item["type"])
    # A file is typed by a person: unknown fields are typos here (the wire tolerates them)
    unknown = unknown_field(envelope_of(model), item) if "id" in item else (
        next((k for k in item if k not in SHORT_FORM), None) or unknown_field(model, item.get("payload"), "payload"))
    if unknown:
        raise SchemaError(f"field {unknown!r}: not a field of a {item['type']} event (a typo?)")
    if "id" in item:
        return decode_obj(item)
    from pydantic import ValidationError

    try:
        payload = model.model_validate(item.get("payload", {}))
    except ValidationError as exc:
        raise SchemaError(describe_validation_error(exc).replace("field '", "field 'payload.", 1)) from None
    try:  # the envelope checks what the file may set besides the payload: the cluster
        return make_envelope(payload, cluster=item.get("cluster", default_cluster), source=source)
    except ValidationError as exc:
        raise SchemaError(describe_validation_error(exc)) from None


def run_publish(args: argparse.Namespace) -> int:
    events = load_events(args.file, args.cluster)

    async def publish() -> None:
        async with bus_for(args) as bus:
            for envelope in events:
                await bus.publish_envelope(envelope)

    asyncio.run(publish())
    print(f"published {len(events)} event(s) from {args.file}")
    return 0


def run_tail(args: argparse.Namespace) -> int:
    if args.stream not in STREAMS:
        raise CliError(f"unknown stream {args.stream!r}; known: {', '.join(STREAMS)}")
    try:
        start = StartAt.parse(args.start)
    except ValueError as exc:
        raise CliError(str(exc)) from None

    async def tail() -> None:
        count = 0
        async with bus_for(args, read_only=True) as bus:
            async for raw, event in bus.read(args.stream, start, follow=not args.no_follow):
                emit_item(args.output, event_document(raw.position, event),
                          lambda: format_event(raw.position, event), first=count == 0)
                count += 1
                if args.limit and count >= args.limit:
                    return

    try:
        asyncio.run(tail())
    except KeyboardInterrupt:
        pass
    return 0


def event_document(position: int, event: Envelope[Any] | SchemaError) -> dict[str, Any]:
    """One event for -o json|yaml: its stream position and the whole
    envelope as on the wire, or the reason it was refused."""
    if isinstance(event, SchemaError):
        return {"position": position, "error": str(event)}
    return {"position": position, "event": event.model_dump(mode="json")}


def format_event(position: int, event: Envelope[Any] | SchemaError) -> str:
    """One readable block per event: a header line, then the payload as YAML."""
    if isinstance(event, SchemaError):
        return f"#{position}  <{event}>"  # the reason says what: oversized, undecodable, wrong stream
    header = f"#{position}  {event.time:%Y-%m-%d %H:%M:%S}  {event.type} v{event.version}  " \
             f"cluster={event.cluster} key={event.key} from={event.source}"
    body = yaml.safe_dump(event.payload.model_dump(mode="json", exclude_defaults=True), sort_keys=False,
                          default_flow_style=None, width=120).rstrip()
    return header + "\n" + "\n".join("    " + line for line in body.splitlines())


