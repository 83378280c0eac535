"""`tidal schemas export|check|crds`."""

from __future__ import annotations

import argparse
from pathlib import Path

from tidal_schemas import crd, export

from .errors import CliError
from .options import make_dir


def add(subparsers) -> None:
    parser = subparsers.add_parser("schemas", help="JSON Schema and AsyncAPI files of every event")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="{export,check,crds}")
    for verb, text in (("export", "regenerate the files from the models"),
                       ("check", "exit 1 when the files differ from the models")):
        sub = verbs.add_parser(verb, help=text, description=text)
        sub.add_argument("--dir", type=Path, default=Path("schemas"), help="target folder (default: schemas)")
        sub.set_defaults(func=run)
    crds = verbs.add_parser("crds", help="the Tenant and FairShare CRDs, generated from the models",
                            description="Write the CustomResourceDefinitions (or, with --check, exit 1 when the "
                                        "files differ from the models).")
    crds.add_argument("--dir", type=Path, default=crd.CRD_DIR, help=f"target folder (default: {crd.CRD_DIR})")
    crds.add_argument("--check", action="store_true", help="compare instead of writing")
    crds.set_defaults(func=run_crds)


def run_crds(args: argparse.Namespace) -> int:
    if args.check:
        problems = crd.drift(args.dir)
        if problems:
            raise CliError(f"CRDs in {args.dir}/ drifted from the models ({'; '.join(problems)}); "
                           "run `tidal schemas crds`", exit_code=1)
        print(f"{args.dir}/ matches the models")
        return 0
    make_dir(args.dir, "--dir")
    names = crd.write(args.dir)
    print(f"wrote {len(names)} files to {args.dir}/")
    return 0


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
