"""Reading the files CLI commands take: bounded, strict, one clear line on error.

Every input file passes here before it is parsed:

- its size is checked first, against `TIDAL_CLI_MAX_FILE_BYTES` (2 MiB by
  default), and no more than that is ever read;
- YAML is read without aliases (`&a` / `*a`: a few KB of them expand to
  gigabytes) and without duplicate keys (PyYAML keeps the last one
  silently); JSON refuses duplicate keys and NaN/Infinity too;
- nesting deeper than the parser can follow is an error, not a crash.

Which fields a file may hold is the command's business (`strict_fields`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidal_bus import MAX_EVENT_BYTES
from tidal_schemas import Envelope, SchemaError, encode

from .errors import CliError

DEFAULT_MAX_FILE_BYTES = 2 << 20
"""Parsing costs memory: a YAML file of 2 MiB of tiny items is about 200 MiB
of parser nodes. Every file Tidal ships is far smaller (the openb pod list,
the largest, is 0.6 MB); raise it with TIDAL_CLI_MAX_FILE_BYTES."""


class CliSettings(BaseSettings):
    """Limits of the CLI's inputs (`TIDAL_CLI_…`)."""

    model_config = SettingsConfigDict(env_prefix="TIDAL_CLI_", extra="ignore")

    max_file_bytes: int = Field(DEFAULT_MAX_FILE_BYTES, gt=0, le=1 << 40,
                                description="largest input file, checked before it is read")


def max_file_bytes() -> int:
    """The input-file limit in force; CliError naming the variable when it is set wrong."""
    try:
        return CliSettings().max_file_bytes
    except ValidationError as exc:
        raise CliError(f"TIDAL_CLI_MAX_FILE_BYTES: {exc.errors()[0]['msg']}") from None


def read_bounded(path: Path, limit: int | None = None) -> bytes:
    """The bytes of `path`, refused before reading when over `limit`
    (default: `max_file_bytes()`); CliError naming the file otherwise."""
    limit = limit or max_file_bytes()
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                raise CliError(_too_big(path, size, limit))
            data = handle.read(limit + 1)  # a pipe or /proc file has no size until read
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise CliError(_too_big(path, len(data), limit, at_least=True))
    return data


def check_size(path: Path, limit: int | None = None) -> None:
    """CliError when the file at `path` is over the limit (for files another
    module reads); a missing file is left to that reader to report."""
    limit = limit or max_file_bytes()
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size > limit:
        raise CliError(_too_big(path, size, limit))


def _too_big(path: Path, size: int, limit: int, at_least: bool = False) -> str:
    return (f"{path}: {'over ' if at_least else ''}{size} bytes, over the {limit}-byte limit for input files "
            "(TIDAL_CLI_MAX_FILE_BYTES)")


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: several times faster


def check_yaml(data: bytes) -> None:
    """yaml.YAMLError when the YAML in `data` uses an alias (`*a`, also
    behind a merge key `<<: *a`) or repeats a key in one mapping. One pass
    over the parser's events, in constant memory but for the nesting: an
    alias bomb is refused before anything is built."""
    stack: list[list] = []  # per open collection: [keys seen or None for a sequence, next scalar is a key]
    for event in yaml.parse(data, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.MarkedYAMLError(problem="aliases (*name) are not accepted", problem_mark=event.start_mark)
        parent = stack[-1] if stack else None
        if isinstance(event, yaml.ScalarEvent) and parent is not None and parent[0] is not None:
            if parent[1]:
                if event.value in parent[0]:
                    raise yaml.MarkedYAMLError(problem=f"duplicate key {event.value[:60]!r}",
                                               problem_mark=event.start_mark)
                parent[0].add(event.value)
            parent[1] = not parent[1]
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if parent is not None and parent[0] is not None:
                parent[1] = not parent[1]  # a collection as a key or a value takes that turn
            stack.append([set() if isinstance(event, yaml.MappingStartEvent) else None, True])
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            stack.pop()


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"duplicate key {key[:60]!r}")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_document(data: bytes, path: Path) -> Any:
    """The JSON (by suffix) or YAML document in `data`; CliError naming the file."""
    is_json = path.suffix == ".json"
    try:
        if is_json:
            return json.loads(data, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
        check_yaml(data)
        return yaml.load(data, Loader=_Loader)  # noqa: S506 - a safe loader
    except (ValueError, yaml.YAMLError) as exc:  # ValueError: an int of 5,000 digits, a duplicate JSON key
        raise CliError(f"{path}: not valid {'JSON' if is_json else 'YAML'}: {_first_line(exc)}") from None
    except RecursionError:  # both parsers recurse once per level of nesting
        raise CliError(f"{path}: not valid {'JSON' if is_json else 'YAML'}: nested too deeply") from None


def check_yaml_file(path: Path) -> None:
    """Size, aliases and duplicate keys of a YAML file another module parses
    (a scenario): CliError naming the file."""
    data = read_bounded(path)
    try:
        check_yaml(data)
    except yaml.YAMLError as exc:
        raise CliError(f"{path}: not valid YAML: {_first_line(exc)}") from None
    except RecursionError:
        raise CliError(f"{path}: not valid YAML: nested too deeply") from None


def load_document(path: Path) -> Any:
    """Read (bounded) and parse one input file."""
    return parse_document(read_bounded(path), path)


def read_items(path: Path, what: str) -> list[Any]:
    """The document in `path` as a list (a single mapping becomes a list of
    one); CliError naming the file when it is missing, unreadable, too big,
    not valid or empty."""
    document = load_document(path)
    items = document if isinstance(document, list) else [document]
    if not items or items == [None]:
        raise CliError(f"{path}: no {what} in the file")
    return items


def _first_line(exc: Exception) -> str:
    text = str(exc)
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        text = f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else exc.problem
    lines = text.splitlines()
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
