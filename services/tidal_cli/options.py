"""Options shared by commands, and the argument types that check numbers,
names and paths where they are parsed: a bad value is one line naming the
option, exit 2 (argparse's usage error), never an internal error later."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

from tidal_runtime.settings import DEFAULT_BUS_URL, DEFAULT_CLUSTER

from .errors import CliError

MAX_SECONDS = 1e7
"""Longest duration an option takes (about 4 months): beyond it a timeout is
a typo, and datetime or the event loop would overflow on it."""


def number(low: float | None = None, high: float | None = None, *, above: bool = False,
           integer: bool = False) -> Callable[[str], float | int]:
    """An argparse type: a finite number (NaN and infinities are refused) in
    [low, high] — (low, high] with `above` — and whole with `integer`."""
    def parse(text: str) -> float | int:
        try:
            value: float | int = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a{' whole' if integer else ''} number: {text[:40]!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"not a finite number: {text[:40]!r}")
        if low is not None and (value <= low if above else value < low):
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {low:g}, got {text[:40]}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high:g}, got {text[:40]}")
        return value

    parse.__name__ = "number"
    return parse


seconds = number(0, MAX_SECONDS, above=True)
"""A positive, finite duration in seconds."""
seconds_or_zero = number(0, MAX_SECONDS)
port = number(0, 65535, integer=True)
count = number(0, 10**12, integer=True)


def namespace_name(text: str) -> str:
    """--namespace: the stream namespace rule of `tidal_bus.subjects`."""
    from tidal_bus.subjects import check_namespace

    try:
        return check_namespace(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_CLUSTER = re.compile(r"^[A-Za-z0-9_-]{1,63}$")


def cluster_name(text: str) -> str:
    """--cluster: letters, digits, '_' or '-', as TIDAL_CLUSTER."""
    if not _CLUSTER.match(text):
        raise argparse.ArgumentTypeError(f"{text[:70]!r}: use 1-63 letters, digits, '_' or '-'")
    return text


def add_bus_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bus", default=os.environ.get("TIDAL_BUS_URL", DEFAULT_BUS_URL),
                        help="nats://host:port or kafka://host:port (env TIDAL_BUS_URL)")
    parser.add_argument("--namespace", type=namespace_name, default=os.environ.get("TIDAL_NAMESPACE", "tidal"),
                        help="stream namespace on the broker (env TIDAL_NAMESPACE)")
    parser.add_argument("--connect-timeout", type=seconds, default=5.0,
                        help="seconds to wait for the first connection to the bus")
    parser.add_argument("--cluster", type=cluster_name, default=os.environ.get("TIDAL_CLUSTER", DEFAULT_CLUSTER),
                        help="cluster id for events this command writes (env TIDAL_CLUSTER)")


def bus_options(args: argparse.Namespace, *, read_only: bool = False) -> dict:
    """Connection options of a CLI command's buses: fail fast when the broker
    is not there; a command that only reads never creates or changes a stream."""
    from tidal_bus import options_for

    return options_for(args.bus, connect_deadline_s=args.connect_timeout, read_only=read_only)


def bus_for(args: argparse.Namespace, source: str = "cli", *, read_only: bool = False):
    """A Bus for a CLI command, failing fast when the broker is not there."""
    from tidal_bus import Bus

    return Bus.from_url(args.bus, namespace=args.namespace, cluster=args.cluster, source=source,
                        **bus_options(args, read_only=read_only))


def make_dir(path: Path, option: str) -> Path:
    """Create directory `path` (and parents) for `option`; CliError naming
    the option when the system refuses (`/proc/x`, a file in the way)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"{option} {path}: cannot create the directory: {exc.strerror or exc}") from None
    return path


def write_file(path: Path, text: str, option: str, *, mode: int | None = None) -> None:
    """Write `text` to `path` for `option` (creating its directory), with
    file `mode` when given; CliError naming the option when that fails."""
    make_dir(path.parent, option)
    try:
        if mode is None:
            path.write_text(text)
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise CliError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None
