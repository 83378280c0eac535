"""Generate `schemas/`: a JSON Schema per event and one AsyncAPI document.

The files are derived from the models; `check` reports any drift so a test
can fail when someone changes a model without regenerating.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from .envelope import envelope_of, event_types
from .streams import STREAMS, StreamSpec

ASYNCAPI_FILE = "asyncapi.json"


def event_schema(event_type: str) -> dict[str, Any]:
    """JSON Schema of the full envelope carrying `event_type`."""
    model = event_types()[event_type]
    schema = envelope_of(model).model_json_schema(mode="serialization", by_alias=False)  # events go out by field name
    schema["title"] = f"{event_type} v{model.VERSION}"
    schema["$id"] = f"https://tidal.dev/schemas/{event_type}.json"
    schema["properties"]["type"]["const"] = event_type
    return schema


def _lane_note(stream: StreamSpec) -> str:
    if stream.side_lane is None:
        return ""
    return (f" Events of the side lane '{stream.side_lane}' (see StreamSpec.side_lane) get '.{stream.side_lane}' "
            f"after the key on NATS and the record header 'tidal-lane: {stream.side_lane}' on Kafka.")


def asyncapi_document() -> dict[str, Any]:
    """One AsyncAPI 3.0 document describing every stream and message."""
    channels: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for event_type, model in event_types().items():
        stream = STREAMS[event_type]
        name = event_type.replace(".", "_")
        messages[name] = {
            "name": event_type,
            "title": model.__name__,
            "summary": (model.__doc__ or "").strip().splitlines()[0],
            "contentType": "application/json",
            "payload": {"$ref": f"./{event_type}.json"},
        }
        channels[name] = {
            "address": stream.subject_pattern(),
            "description": f"NATS subject pattern; on Kafka the topic is '{{namespace}}.{stream.name}', "
            f"{stream.partitions} partitions by key. Retention: {stream.max_age_s:.0f} s." + _lane_note(stream),
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        operations[f"publish_{name}"] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{name}"},
            "summary": f"produced by: {', '.join(stream.producers)}",
        }
        operations[f"consume_{name}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{name}"},
            "summary": f"consumed by: {', '.join(stream.consumers) or 'operators (tidal events tail)'}",
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Tidal event streams",
            "version": "1.0.0",
            "description": "Every Tidal event is a JSON envelope {id, type, version, cluster, key, "
            "time, source, causation_id, payload}.",
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
    }


def rendered() -> dict[str, bytes]:
    """Every file of `schemas/`, by file name, as it should be on disk."""
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    files = {f"{t}.json": orjson.dumps(event_schema(t), option=options) for t in event_types()}
    files[ASYNCAPI_FILE] = orjson.dumps(asyncapi_document(), option=options)
    return files


def export(directory: Path) -> list[str]:
    """Write the files; return the names written. Stale .json files are removed."""
    directory.mkdir(parents=True, exist_ok=True)
    files = rendered()
    for stale in directory.glob("*.json"):
        if stale.name not in files:
            stale.unlink()
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return sorted(files)


def drift(directory: Path) -> list[str]:
    """Names of files that are missing, stale or different from the models."""
    files = rendered()
    problems = []
    for name, content in files.items():
        path = directory / name
        if not path.exists():
            problems.append(f"{name}: missing")
        elif path.read_bytes() != content:
            problems.append(f"{name}: differs from the models")
    for extra in sorted(p.name for p in directory.glob("*.json") if p.name not in files):
        problems.append(f"{extra}: no model produces it")
    return problems
