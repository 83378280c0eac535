"""`tidal up` and `tidal run SERVICE`."""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path

from pydantic import ValidationError

from tidal_runtime import run_service

from .errors import CliError
from .options import cluster_name, namespace_name, port
from .services import SERVICES, load


def add(subparsers) -> None:
    up = subparsers.add_parser(
        "up", help="start nats-server and every service on this machine",
        description="Start an embedded nats-server with JetStream (data in --data-dir) and every service, "
                    "print what runs where, stop everything on Ctrl-C. With --bus, use that broker instead.")
    up.add_argument("--bus", help="external broker: nats://host:port or kafka://host:port")
    up.add_argument("--data-dir", type=Path, default=Path(".tidal"), help="where NATS data and logs go")
    up.add_argument("--nats-port", type=port, default=4222, help="port of the embedded NATS (0 = any free)")
    up.add_argument("--services", help="comma-separated subset of services to start")
    up.add_argument("--namespace", type=namespace_name, default="tidal")
    up.add_argument("--cluster", type=cluster_name, default="local")
    up.set_defaults(func=run_up)

    run = subparsers.add_parser("run", help="run one service in the foreground (what containers do)")
    run.add_argument("service", help=f"one of: {', '.join(SERVICES) or '(none installed)'}")
    run.set_defaults(func=run_one)


def run_up(args: argparse.Namespace) -> int:
    from .stack import Stack

    names = [s.strip() for s in args.services.split(",")] if args.services else None
    stack = Stack(args.data_dir, bus_url=args.bus, nats_port=args.nats_port, namespace=args.namespace,
                  cluster=args.cluster, services=names)
    stopping = False

    def on_signal(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        stack.start()
        stack.wait_ready()
        print(stack.describe(), flush=True)
        print("ready; Ctrl-C stops everything", flush=True)
        while not stopping:
            stack.check_alive()
            time.sleep(0.2)
    finally:
        stack.stop()
        print("stopped", flush=True)
    return 0


def run_one(args: argparse.Namespace) -> int:
    try:
        service_class = load(args.service)
    except KeyError as exc:
        raise CliError(str(exc.args[0])) from None
    try:
        settings = service_class.settings_class()
    except ValidationError as exc:
        first = exc.errors()[0]
        raise CliError(f"setting {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    return run_service(service_class, settings)
