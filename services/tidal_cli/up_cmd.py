"""`tidal up` and `tidal run SERVICE`."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

from pydantic import ValidationError

from tidal_runtime.configuration import ENV_VAR, ConfigurationError, load_settings, read_document
from tidal_runtime.settings import DEFAULT_CLUSTER

from .errors import CliError
from .options import cluster_name, namespace_name, number, port
from .output import add_output_option, render
from .supervise import Backoff
from .services import SERVICES, load


def add(subparsers) -> None:
    up = subparsers.add_parser(
        "up", help="start nats-server and every service on this machine",
        description="Start an embedded nats-server with JetStream (data in --data-dir) and every service, "
                    "print what runs where, and keep them running: a process that exits is started again "
                    "with exponential back-off (a line says so). Only Ctrl-C (or SIGTERM) stops the stack. "
                    "With --bus, use that broker instead. `tidal up --status` shows what a running stack runs.")
    up.add_argument("--bus", help="external broker: nats://host:port or kafka://host:port")
    up.add_argument("--data-dir", type=Path, default=Path(".tidal"), help="where NATS data and logs go")
    up.add_argument("--nats-port", type=port, default=4222, help="port of the embedded NATS (0 = any free)")
    up.add_argument("--services", help="comma-separated subset of services to start")
    up.add_argument("--namespace", type=namespace_name, default="tidal")
    up.add_argument("--cluster", type=cluster_name, default=DEFAULT_CLUSTER,
                    help=f"cluster id of the services (TIDAL_CLUSTER; default {DEFAULT_CLUSTER}, as the manifests)")
    up.add_argument("--restart-delay", type=number(0.01, 60), default=1.0, metavar="SECONDS",
                    help="first back-off before restarting a crashed process; doubles per quick crash, "
                         "up to 30 s (default 1)")
    up.add_argument("--config", type=Path, metavar="FILE", help="TidalConfiguration file every service reads")
    up.add_argument("--status", action="store_true",
                    help="print the status of the stack running in --data-dir (pids, restarts) and exit")
    add_output_option(up)  # of --status
    up.set_defaults(func=run_up)

    run = subparsers.add_parser("run", help="run one service in the foreground (what containers do)")
    run.add_argument("service", help=f"one of: {', '.join(SERVICES) or '(none installed)'}")
    run.add_argument("--config", type=Path, metavar="FILE", help="TidalConfiguration file (default: $TIDAL_CONFIG)")
    run.set_defaults(func=run_one)


def say(line: str) -> None:
    print(f"tidal up: {line}", flush=True)


def run_up(args: argparse.Namespace) -> int:
    from .stack import Stack

    if args.status:
        return show_status(args.data_dir, args.output)
    if args.config is not None:  # every service started reads it; a file no service can read stops here, once
        os.environ[ENV_VAR] = str(_checked(args.config).resolve())
    names = [s.strip() for s in args.services.split(",") if s.strip()] if args.services is not None else None
    stack = Stack(args.data_dir, bus_url=args.bus, nats_port=args.nats_port, namespace=args.namespace,
                  cluster=args.cluster, services=names)
    policy = Backoff(base_s=args.restart_delay, cap_s=max(30.0, args.restart_delay))
    stopping = False

    def on_signal(signum, frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        stack.start()
        stack.wait_ready(restarting=(policy, say))
        stack.write_status()
        print(stack.describe(), flush=True)
        print("ready; Ctrl-C stops everything", flush=True)
        while not stopping:
            # A crash is not a reason to stop: start it again, as a supervisor would.
            if stack.supervise(policy, say):
                stack.write_status()
                print(stack.describe(), flush=True)
            time.sleep(0.2)
    finally:
        stack.stop()
        print("stopped", flush=True)
    return 0


def show_status(data_dir: Path, output: str = "table") -> int:
    """`tidal up --status`: the status file a running `tidal up` keeps
    (with -o json|yaml: that file, with `running` said of the stack and
    of each process as the table says it)."""
    from .stack import STATUS_FILE

    path = data_dir / STATUS_FILE
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        raise CliError(f"--data-dir {data_dir}: no stack status there (is `tidal up` running with it?)") from None
    alive = _alive(status.get("supervisor_pid"))
    if output != "table":
        processes = {name: {**p, "running": bool(alive and p.get("running"))}
                     for name, p in status.get("processes", {}).items()}
        print(render({**status, "running": alive, "processes": processes}, output))
        return 0
    print(f"stack in {data_dir}: {'running' if alive else 'not running'} (supervisor pid "
          f"{status.get('supervisor_pid')}), bus {status.get('bus')}")
    for name, p in status.get("processes", {}).items():
        state = "up" if alive and p.get("running") else "down"
        last = f", last exit {p['last_exit']}" if p.get("last_exit") is not None else ""
        print(f"{name:<12} {state:<5} pid {p.get('pid')}  restarts {p.get('restarts', 0)}{last}")
    return 0


def _alive(pid) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def run_one(args: argparse.Namespace) -> int:
    try:
        service_class = load(args.service)
    except KeyError as exc:
        raise CliError(str(exc.args[0])) from None
    try:
        settings = load_settings(service_class.settings_class, args.config)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        raise CliError(f"setting {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    from tidal_runtime import run_service  # the bus and the service machinery: not for `tidal up` itself

    return run_service(service_class, settings)


def _checked(path: Path) -> Path:
    try:
        read_document(path)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    return path
