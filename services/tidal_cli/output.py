"""`-o table|json|yaml`, as kubectl's `-o`: every read command prints its
human table by default, or the same facts as one JSON or YAML document
that a script parses back. A command that prints a stream of events
(`events tail`) prints one JSON object a line, or YAML documents
separated by `---`, so a follower's output can be read as it comes."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import yaml

FORMATS = ("table", "json", "yaml")


def add_output_option(parser: argparse.ArgumentParser, *, json_alias: bool = False) -> None:
    """`-o/--output FORMAT` (default table); with `json_alias`, also the
    older `--json` flag meaning `-o json`."""
    parser.add_argument("-o", "--output", choices=FORMATS, default="table",
                        help="output format: table (default, for people), json or yaml (for scripts)")
    if json_alias:
        parser.add_argument("--json", dest="output", action="store_const", const="json",
                            help="the same as -o json")


def render(document: Any, output: str) -> str:
    """`document` (plain data: dicts, lists, strings, numbers) as JSON or YAML."""
    if output == "json":
        return json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False)
    if output == "yaml":
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120).rstrip()
    raise ValueError(f"not a document format: {output!r}")


def emit(args: argparse.Namespace, document: Any, table: Callable[[], str]) -> None:
    """Print `document` in the format asked for; `table()` makes the default one."""
    output = getattr(args, "output", "table")
    print(table() if output == "table" else render(document, output), flush=True)


def emit_item(output: str, item: Any, table: Callable[[], str], *, first: bool) -> None:
    """Print one item of a stream: a JSON line, a YAML document (`---`
    between documents), or its table block."""
    if output == "json":
        print(json.dumps(item, ensure_ascii=False), flush=True)
    elif output == "yaml":
        print(("" if first else "---\n") + render(item, "yaml"), flush=True)
    else:
        print(table(), flush=True)
