"""`tidal fairshare trace`: replay a usage series through the fair-share
decay and print how the score follows it.

    tidal fairshare trace --adjust-time 1d --period 1h --usage usage.csv

The usage file is CSV with header `t,usage` (t in seconds, strictly
increasing; usage in the resource's units) and describes a step function:
each value holds from its t until the next row. The output is CSV
`t,usage,score`, one row per period from the first t to the last. The first
row is the starting state (score = --initial-score, no update); every later
row applies `fairshare.decay` once with the usage held at that instant, as
the scoring service does with the pods it sees running at each tick.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from .durations import parse_duration
from .fairshare import decay

PROG = "tidal fairshare trace"
MAX_STEPS = 1_000_000  # rows printed; a longer trace is a mistaken period, not a wish


class UsageFileError(Exception):
    """The usage file cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class UsageSeries:
    """A step function: usage[i] holds from times[i] until times[i + 1]."""

    times: list[float]
    usage: list[float]

    def at(self, t: float) -> float:
        """The usage held at time t (the last row with row.t ≤ t)."""
        return self.usage[bisect.bisect_right(self.times, t) - 1]


def _positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds is None or seconds <= 0:
        raise argparse.ArgumentTypeError(f"not a positive duration: {text!r} (use e.g. 90, 90s, 15m, 2h, 7d)")
    return seconds


def _number(text: str, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageFileError(f"{where}: {what} is not a number: {text!r}") from None
    if not math.isfinite(value):
        raise UsageFileError(f"{where}: {what} is not finite: {text!r}")
    return value


def read_usage(path: str) -> UsageSeries:
    """Parse a `t,usage` CSV into a step function, or raise UsageFileError
    naming the file and line of the first problem."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageFileError(f"{path}: cannot read usage file: {exc}") from None
    if not rows or [cell.strip() for cell in rows[0]] != ["t", "usage"]:
        found = repr(",".join(rows[0])) if rows else "an empty file"
        raise UsageFileError(f"{path}:1: expected header 't,usage', found {found}")
    times: list[float] = []
    usage: list[float] = []
    for line_no, row in enumerate(rows[1:], start=2):
        where = f"{path}:{line_no}"
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != 2:
            raise UsageFileError(f"{where}: expected 2 fields (t,usage), found {len(row)}")
        t = _number(row[0].strip(), "t", where)
        value = _number(row[1].strip(), "usage", where)
        if value < 0:
            raise UsageFileError(f"{where}: usage must not be negative, found {value:g}")
        if times and t <= times[-1]:
            raise UsageFileError(f"{where}: t must increase, {t:g} follows {times[-1]:g}")
        times.append(t)
        usage.append(value)
    if not times:
        raise UsageFileError(f"{path}: no data rows after the header")
    return UsageSeries(times, usage)


def trace(series: UsageSeries, adjust_time_s: float, period_s: float,
          initial: float = 0.0) -> list[tuple[float, float, float]]:
    """(t, usage, score) at every period step from the first t to the last."""
    start, end = series.times[0], series.times[-1]
    # Steps are counted, not accumulated, so float error cannot add a step.
    span = (end - start) / period_s  # inf when t runs from -1e308 to 1e308
    steps = math.floor(span + 1e-9) if math.isfinite(span) else MAX_STEPS + 1
    if steps > MAX_STEPS:
        count = f"{steps}" if math.isfinite(span) else "more"
        raise UsageFileError(f"{count} periods from t={start:g} to t={end:g} with --period {period_s:g}s: "
                             f"more than {MAX_STEPS:,} rows; use a longer --period")
    score = initial
    rows = [(start, series.at(start), score)]
    for k in range(1, steps + 1):
        t = start + k * period_s
        usage = series.at(t)
        score = decay(score, usage, period_s, adjust_time_s)
        rows.append((t, usage, score))
    return rows


def _fmt(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors: one line, exit 2, like `tidal`
        self.exit(2, f"{self.prog}: {message}\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's options on `parser` (so `tidal` can mount it as
    a subcommand and call `run`)."""
    parser.add_argument("--adjust-time", required=True, type=_positive_duration, metavar="T",
                        help="adjustment time T (seconds or 90s, 15m, 2h, 7d); 4T is the settle time")
    parser.add_argument("--period", required=True, type=_positive_duration, metavar="DT",
                        help="update period Δt (seconds or suffixed)")
    parser.add_argument("--usage", required=True, metavar="FILE", help="CSV with header t,usage")
    parser.add_argument("--initial-score", type=float, default=0.0, metavar="S",
                        help="score at the first t (default 0: no history)")


def run(args: argparse.Namespace) -> int:
    """Print the trace for parsed arguments; 0, or 2 with one line on
    stderr when the input is bad."""
    if not math.isfinite(args.initial_score) or args.initial_score < 0:
        print(f"{PROG}: --initial-score must be a non-negative number", file=sys.stderr)
        return 2
    try:
        rows = trace(read_usage(args.usage), args.adjust_time, args.period, args.initial_score)
    except UsageFileError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["t", "usage", "score"])
    for t, usage, score in rows:
        out.writerow([_fmt(t), _fmt(usage), repr(score)])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (2 on bad input)."""
    parser = _Parser(prog=PROG, description="Print how a fair-share score follows a usage series (SPEC §C).")
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 2
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
