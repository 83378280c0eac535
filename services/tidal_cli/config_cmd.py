"""`tidal config default|check|reference`: the TidalConfiguration file.

The file's sections are the settings classes of the services `tidal run`
knows (services.SERVICES), so what is printed, checked and documented here
is what the services read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tidal_bus.auth import BusAuth
from tidal_runtime.config_document import TidalConfiguration
from tidal_runtime.config_reference import reference
from tidal_runtime.configuration import ConfigurationError, parse_yaml

from .errors import CliError, one_line
from .files import CliSettings, read_bounded
from .services import SERVICES, load

REFERENCE = Path("docs/configuration.md")

ENV_MODELS = {
    "bus credentials and TLS": (BusAuth, "Each pod mounts its own bus credentials (k8s/overlays/nats/bus-auth.yaml), "
                                "so they stay in the environment; give a secret as a file (`…_FILE`). What each "
                                "one does: docs/security.md and `tidal_bus.auth`."),
    "the CLI": (CliSettings, "Limits of the files `tidal` commands read."),
}


def add(subparsers) -> None:
    parser = subparsers.add_parser("config", help="the TidalConfiguration file: its defaults, a check, the reference",
                                   description="One file configures every service (TIDAL_CONFIG or "
                                               "`tidal run SERVICE --config FILE`); environment variables "
                                               "override single fields.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="{default,check,reference}")
    default = verbs.add_parser("default", help="print the full default file (YAML, every setting explained)")
    default.set_defaults(func=run_default)
    check = verbs.add_parser("check", help="validate a file: exit 0, or 1 with one line per problem",
                             description="Validate FILE as every service would read it (the environment aside): "
                                         "apiVersion, kind, every key known, every value valid.")
    check.add_argument("file", type=Path)
    check.set_defaults(func=run_check)
    ref = verbs.add_parser("reference", help=f"write the Markdown reference (default {REFERENCE})",
                           description="Write the configuration reference generated from the settings classes "
                                       "(or, with --check, exit 1 when the file differs from them).")
    ref.add_argument("--out", type=Path, default=REFERENCE, help=f"where (default: {REFERENCE}; - for stdout)")
    ref.add_argument("--check", action="store_true", help="compare instead of writing")
    ref.set_defaults(func=run_reference)


def configuration() -> TidalConfiguration:
    """The TidalConfiguration of every registered service."""
    return TidalConfiguration.of(load(name).settings_class for name in SERVICES)


def reference_text() -> str:
    """docs/configuration.md as the models say it should read."""
    return reference(configuration(), ENV_MODELS)


def run_default(args: argparse.Namespace) -> int:
    sys.stdout.write(configuration().default_yaml())
    return 0


def run_check(args: argparse.Namespace) -> int:
    try:
        document = parse_yaml(read_bounded(args.file), args.file)
    except ConfigurationError as exc:
        problems = [f"{args.file}: {p}" for p in exc.problems]
    else:
        problems = [f"{args.file}: {p}" for p in configuration().problems(document)]
    for problem in problems:
        print(f"tidal: {one_line(problem)}", file=sys.stderr)
    if problems:
        return 1
    print(f"{args.file}: valid {document['kind']} ({document['apiVersion']})")
    return 0


def run_reference(args: argparse.Namespace) -> int:
    text = reference_text()
    if str(args.out) == "-":
        sys.stdout.write(text)
        return 0
    if args.check:
        try:
            current = args.out.read_text()
        except OSError as exc:
            raise CliError(f"{args.out}: {exc.strerror or exc}", exit_code=1) from None
        if current != text:
            raise CliError(f"{args.out} drifted from the settings classes; run `tidal config reference`", exit_code=1)
        print(f"{args.out} matches the settings classes")
        return 0
    try:
        args.out.write_text(text)
    except OSError as exc:
        raise CliError(f"--out {args.out}: {exc.strerror or exc}") from None
    print(f"wrote {args.out}")
    return 0
