"""Checked reading of the openb CSVs: every cell is parsed strictly and
every problem is one `TraceError` line naming the file, line and column.

A trace is somebody else's file: a bad cell must stop the run with where
it is, not surface later as a crash in placement, an event that cannot be
published, or an inflation loop that never ends (a negative GPU count).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from pathlib import Path

MAX_AMOUNT = 2**53  # CPU and memory figures: exact in JSON and in a float
MAX_TIME = 2**53
MAX_NAME = 200  # a pod name plus the protocol's `-tuned-N` stays a 253-character Name
_WHOLE = re.compile(r"^[0-9]+$")  # ASCII only: int() would also take "٣", "1_000" and " +7"
_NUMBER = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")


class TraceError(ValueError):
    """A trace CSV that cannot be used; the message is one line naming the
    file, the line and the column."""


def _shown(text: str) -> str:
    quoted = repr(text)
    return quoted if len(quoted) <= 40 else quoted[:40] + "…"


class Row:
    """The cells of one data row, by column name, with checked parsers."""

    def __init__(self, path: Path, line: int, cells: dict[str, str]) -> None:
        self.path, self.line, self.cells = path, line, cells

    def error(self, column: str, problem: str) -> TraceError:
        return TraceError(f"{self.path}: line {self.line}: column {column}: {problem}")

    def text(self, column: str, *, required: bool = False, longest: int = 253) -> str:
        value = (self.cells.get(column) or "").strip()
        if required and not value:
            raise self.error(column, "is empty")
        if len(value) > longest or not value.isprintable():
            raise self.error(column, f"{_shown(value)} is not a name of at most {longest} printable characters")
        return value

    def whole(self, column: str, high: int = MAX_AMOUNT) -> int:
        value = (self.cells.get(column) or "").strip()
        if not _WHOLE.match(value) or len(value) > 20 or int(value) > high:
            raise self.error(column, f"{_shown(value)} is not a whole number in 0..{high}")
        return int(value)

    def time(self, column: str) -> int | None:
        """Empty for "never"; else seconds, possibly written as a float."""
        value = (self.cells.get(column) or "").strip()
        if not value:
            return None
        number = float(value) if _NUMBER.match(value) and len(value) <= 40 else math.nan
        if not math.isfinite(number) or abs(number) > MAX_TIME:
            raise self.error(column, f"{_shown(value)} is not a time in seconds within ±{MAX_TIME}")
        return int(number)


def rows(path: str | Path, required: tuple[str, ...]) -> Iterator[Row]:
    """The data rows of a CSV whose header has every `required` column;
    TraceError when it cannot be read, lacks a column or a row's length
    differs from the header's."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = [name.strip() for name in next(reader, [])]
            missing = [name for name in required if name not in header]
            if missing:
                raise TraceError(f"{path}: line 1: the header lacks {', '.join(missing)} "
                                 f"(found {_shown(','.join(header))})")
            for cells in reader:
                if not cells:
                    continue  # a blank line
                if len(cells) != len(header):
                    raise TraceError(f"{path}: line {reader.line_num}: {len(cells)} cells, the header has "
                                     f"{len(header)}")
                yield Row(path, reader.line_num, dict(zip(header, cells)))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
        raise TraceError(f"{path}: cannot read it as CSV: {reason}") from None


def check_unique(path: str | Path, names: list[tuple[int, str]]) -> None:
    """TraceError when a name repeats: (line, name) pairs in file order."""
    first: dict[str, int] = {}
    for line, name in names:
        if name in first:
            raise TraceError(f"{path}: line {line}: {_shown(name)} repeats the name of line {first[name]}")
        first[name] = line
