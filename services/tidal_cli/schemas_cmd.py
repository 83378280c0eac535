"""`tidal schemas export|check`."""

from __future__ import annotations

import argparse
from pathlib import Path

from tidal_schemas import export

from .errors import CliError
from .options import make_dir


def add(subparsers) -> None:
    parser = subparsers.add_parser("schemas", help="JSON Schema and AsyncAPI files of every event")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="{export,check}")
    for verb, text in (("export", "regenerate the files from the models"),
                       ("check", "exit 1 when the files differ from the models")):
        sub = verbs.add_parser(verb, help=text, description=text)
        sub.add_argument("--dir", type=Path, default=Path("schemas"), help="target folder (default: schemas)")
        sub.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.verb == "export":
        make_dir(args.dir, "--dir")
        names = export.export(args.dir)
        print(f"wrote {len(names)} files to {args.dir}/")
        return 0
    problems = export.drift(args.dir)
    if problems:
        raise CliError(f"schemas in {args.dir}/ drifted from the models ({'; '.join(problems)}); "
                       "run `tidal schemas export`", exit_code=1)
    print(f"{args.dir}/ matches the models")
    return 0
