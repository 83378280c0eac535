"""Options shared by commands that talk to the bus."""

from __future__ import annotations

import argparse
import os

from tidal_runtime.settings import DEFAULT_BUS_URL


def add_bus_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bus", default=os.environ.get("TIDAL_BUS_URL", DEFAULT_BUS_URL),
                        help="nats://host:port or kafka://host:port (env TIDAL_BUS_URL)")
    parser.add_argument("--namespace", default=os.environ.get("TIDAL_NAMESPACE", "tidal"),
                        help="stream namespace on the broker (env TIDAL_NAMESPACE)")
    parser.add_argument("--connect-timeout", type=float, default=5.0,
                        help="seconds to wait for the first connection to the bus")
    parser.add_argument("--cluster", default=os.environ.get("TIDAL_CLUSTER", "local"),
                        help="cluster id for events this command writes (env TIDAL_CLUSTER)")


def bus_options(args: argparse.Namespace) -> dict:
    """Connection options of a CLI command's buses: fail fast when the broker is not there."""
    return {"connect_deadline_s": args.connect_timeout} if args.bus.startswith(("nats", "tls")) else {}


def bus_for(args: argparse.Namespace, source: str = "cli"):
    """A Bus for a CLI command, failing fast when the broker is not there."""
    from tidal_bus import Bus

    return Bus.from_url(args.bus, namespace=args.namespace, cluster=args.cluster, source=source,
                        **bus_options(args))
