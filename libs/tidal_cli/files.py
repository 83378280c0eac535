"""Reading the JSON/YAML files CLI commands take: one clear line on error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

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
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise CliError(f"{path}: not valid {'JSON' if is_json else 'YAML'}: {str(exc).splitlines()[0]}") from None
    items = document if isinstance(document, list) else [document]
    if not items or items == [None]:
        raise CliError(f"{path}: no {what} in the file")
    return items
