"""`tidal`: one command, with a subcommand per job. Errors are one line on
stderr with a non-zero exit code (2 = bad input, 1 = failure); set
TIDAL_DEBUG=1 to see tracebacks."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys

from .errors import CliError, one_line

# Each command and the module that defines it, in `tidal --help` order. main()
# imports only the module of the command it runs: every process start (each
# service under `tidal up` is a `tidal run`) pays for that command's imports,
# not for all of them. COMMANDS, the modules themselves, is imported on first use.
COMMAND_MODULES = {
    "up": "up_cmd", "run": "up_cmd", "demo": "demo_cmd", "simulate": "simulate_cmd", "replay": "replay_cmd",
    "audit": "audit_cmd", "events": "events_cmd", "explain": "explain_cmd", "tenants": "tenants_cmd",
    "schemas": "schemas_cmd", "cpus": "tools_cmd", "fairshare": "tools_cmd", "nats-config": "nats_config_cmd",
    "nats-creds": "nats_creds_cmd", "node": "node_cmd", "webhook-cert": "webhook_cert_cmd",
    "completion": "completion_cmd", "config": "config_cmd",
}


def __getattr__(name: str):
    if name == "COMMANDS":  # the command modules, every one imported
        return _commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _commands() -> list:
    found = globals().get("COMMANDS")
    if found is None:
        found = globals()["COMMANDS"] = [_module(name) for name in dict.fromkeys(COMMAND_MODULES.values())]
    return found


def _module(name: str):
    return importlib.import_module(f"{__package__}.{name}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's usage errors: one line, exit 2
        self.exit(2, f"{self.prog}: {message}\n")


def build_parser(modules: list | None = None) -> argparse.ArgumentParser:
    """The parser of every command in COMMANDS, or of `modules` only."""
    parser = _Parser(prog="tidal", description="Tidal: topology-aware scheduling control plane")
    parser.add_argument("--version", action="version", version=f"tidal {version()}",
                        help="print the installed version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                       parser_class=_Parser)
    for command in _commands() if modules is None else modules:
        command.add(subparsers)
    return parser


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """What main parses `argv` with. A known command first: its module's
    parser alone, since argparse hands every word after the command to that
    command's parser (its help, usage and errors are the same). A bare
    `--version`: no command at all (it exits before one is looked for).
    Otherwise, or once COMMANDS was used (and maybe changed), every command:
    `tidal --help` lists them, an unknown one is told the choices."""
    if "COMMANDS" not in globals():
        if argv[:1] == ["--version"]:
            return build_parser([])
        if argv and argv[0] in COMMAND_MODULES:
            return build_parser([_module(COMMAND_MODULES[argv[0]])])
    return build_parser()


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
    parser = parser_for(argv)
    try:
        if argv[:2] == ["cpus", "pick"]:  # its own parser owns every flag after `pick`
            return _module("tools_cmd").run_cpus_pick(argparse.Namespace(rest=argv[2:]))
        try:
            args = parser.parse_args(join_negative_times(argv))
        except SystemExit as exc:  # a usage error (already one line on stderr) or --help
            return exc.code if isinstance(exc.code, int) else 2
        return args.func(args)
    except CliError as exc:
        return _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        code = _known_failure(exc)
        if code is not None:  # bad input in an event (2), or the bus (1)
            return _fail(str(exc), code)
        if isinstance(exc, BrokenPipeError):  # the reader went away (`| head`): not an error
            sys.stdout = open(os.devnull, "w")
            return 0
        if os.environ.get("TIDAL_DEBUG"):  # a bug: still one line, unless debugging
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc} (TIDAL_DEBUG=1 shows the traceback)", 1)


# The library errors main reports on one line, with their exit codes. They are
# looked up among the modules loaded: one whose module a command never
# imported cannot have been raised, and main imports neither library itself.
KNOWN_FAILURES = (("tidal_schemas.errors", "SchemaError", 2), ("tidal_bus.errors", "BusError", 1))


def _known_failure(exc: Exception) -> int | None:
    for module, name, code in KNOWN_FAILURES:
        error = getattr(sys.modules.get(module), name, None)
        if error is not None and isinstance(exc, error):
            return code
    return None


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
