"""`tidal`: one command, with a subcommand per job. Errors are one line on
stderr with a non-zero exit code (2 = bad input, 1 = failure); set
TIDAL_DEBUG=1 to see tracebacks."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys

from tidal_bus import BusError
from tidal_schemas import SchemaError

from . import demo_cmd, events_cmd, explain_cmd, replay_cmd, schemas_cmd, simulate_cmd, tenants_cmd, tools_cmd, up_cmd
from . import audit_cmd, completion_cmd, config_cmd, nats_config_cmd, nats_creds_cmd, node_cmd, webhook_cert_cmd
from .errors import CliError, one_line

COMMANDS = [up_cmd, demo_cmd, simulate_cmd, replay_cmd, audit_cmd, events_cmd, explain_cmd, tenants_cmd, schemas_cmd,
            tools_cmd, nats_config_cmd, nats_creds_cmd, node_cmd, webhook_cert_cmd, completion_cmd, config_cmd]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage errors: one line, exit 2
        self.exit(2, f"{self.prog}: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tidal", description="Tidal: topology-aware scheduling control plane")
    parser.add_argument("--version", action="version", version=f"tidal {version()}",
                        help="print the installed version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       parser_class=_Parser)
    for command in COMMANDS:
        command.add(subparsers)
    return parser


def version() -> str:
    """The installed package's version (its metadata), "unknown" when not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("tidal")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    # Commands report problems themselves, on one line; library chatter stays quiet.
    logging.basicConfig(level=logging.ERROR, format="tidal: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        if argv[:2] == ["cpus", "pick"]:  # its own parser owns every flag after `pick`
            return tools_cmd.run_cpus_pick(argparse.Namespace(rest=argv[2:]))
        try:
            args = parser.parse_args(join_negative_times(argv))
        except SystemExit as exc:  # a usage error (already one line on stderr) or --help
            return exc.code if isinstance(exc.code, int) else 2
        return args.func(args)
    except CliError as exc:
        return _fail(str(exc), exc.exit_code)
    except SchemaError as exc:
        return _fail(str(exc), 2)
    except BusError as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except Exception as exc:  # a bug: still one line, unless debugging
        if os.environ.get("TIDAL_DEBUG"):
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc} (TIDAL_DEBUG=1 shows the traceback)", 1)


TIME_OPTIONS = ("--from", "--to")
_AGO = re.compile(r"^-[0-9]+(\.[0-9]+)?[smhd]$")


def join_negative_times(argv: list[str]) -> list[str]:
    """`--from -2h` as the README writes it: argparse takes `-2h` for an
    option and says "expected one argument", so such a value is joined to
    its option (`--from=-2h`) before parsing."""
    joined: list[str] = []
    for item in argv:
        if joined and joined[-1] in TIME_OPTIONS and _AGO.match(item):
            joined[-1] = f"{joined[-1]}={item}"
        else:
            joined.append(item)
    return joined


def _fail(message: str, code: int) -> int:
    print(f"tidal: {one_line(message)}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
