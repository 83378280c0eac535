"""Reading the JSON/YAML files CLI commands take: one clear line on error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

from tidal_bus import MAX_EVENT_BYTES
from tidal_schemas import Envelope, SchemaError, encode

from .errors import CliError


def read_items(path: Path, what: str) -> list[Any]:
    """The document in `path` as a list (a single mapping becomes a list of
    one); CliError naming the file when it is missing, unreadable or empty."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    is_json = path.suffix == ".json"
    try:
        document = orjson.loads(text) if is_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:  # ValueError: PyYAML's int() of a 5,000-digit number
        raise CliError(f"{path}: not valid {'JSON' if is_json else 'YAML'}: {_first_line(exc)}") from None
    except RecursionError:  # PyYAML's parser recurses once per level of nesting
        raise CliError(f"{path}: not valid YAML: nested too deeply") from None
    items = document if isinstance(document, list) else [document]
    if not items or items == [None]:
        raise CliError(f"{path}: no {what} in the file")
    return items


def _first_line(exc: Exception) -> str:
    lines = str(exc).splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def check_publishable(envelope: Envelope[Any], where: str) -> None:
    """CliError naming `where` when the event could not be published: text
    JSON cannot hold, or more than the bus's MAX_EVENT_BYTES. Checked for
    every event of a file before the first is published."""
    try:
        size = len(encode(envelope))
    except SchemaError as exc:
        raise CliError(f"{where}: {exc}") from None
    if size > MAX_EVENT_BYTES:
        raise CliError(f"{where}: the event is {size} bytes, over the bus limit of {MAX_EVENT_BYTES} bytes")
