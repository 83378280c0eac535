"""The workload of a `tidal simulate` run, from its flags: an openb trace
(`--nodes` and `--pods`), a scenario file or the synthetic generator. Bad
input is a CliError naming the file, line or field."""

from __future__ import annotations

import argparse

from .errors import CliError
from .files import check_size, check_yaml_file


def _check_files(args: argparse.Namespace) -> None:
    """The workload's files exist and are bounded (size; a scenario's aliases,
    nesting and duplicate keys): refused before the simulator is even imported,
    so a hostile file costs no more than start-up."""
    if args.scenario:
        check_yaml_file(args.scenario)
    for path in (args.nodes, args.pods):
        if path is not None:
            if not path.is_file():
                raise CliError(f"{path}: no such file")
            check_size(path)


def read_workload(args: argparse.Namespace):
    """(workload, release order, the trace's typical shapes, the published
    reference figures); order, shapes and reference only for a trace."""
    _check_files(args)
    if args.nodes:
        return _trace(args)
    if args.scenario:
        from tidal_simulator.scenario import ScenarioError, load_scenario

        try:
            return load_scenario(args.scenario), (), None, {}
        except ScenarioError as exc:
            raise CliError(str(exc)) from None
    return _synthetic(args), (), None, {}


def _trace(args: argparse.Namespace):
    from tidal_simulator.openb import TraceError, read_pods
    from tidal_simulator.report import published_reference
    from tidal_simulator.trace import trace_workload

    inflate = (args.inflate or 1.3) if args.arrive_only else None
    try:
        workload, _ = trace_workload(args.nodes, args.pods, seed=args.seed, arrive_only=args.arrive_only,
                                     inflate=inflate, tenants=args.tenants, usage_level=args.usage_level,
                                     tick_s=args.tick)
    except TraceError as exc:  # already names the file, line and column
        raise CliError(str(exc)) from None
    except (KeyError, ValueError) as exc:
        raise CliError(f"{args.pods} / {args.nodes}: not an openb trace ({type(exc).__name__}: {exc})") from None
    # The measure's typical pods come from the trace as published, before inflation.
    shapes = [p.shape for p in read_pods(args.pods)]
    order = [p.key for p in workload.pods] if args.arrive_only else ()
    return workload, order, shapes, published_reference(args.pods, args.nodes) if args.arrive_only else {}


def _synthetic(args: argparse.Namespace):
    from pydantic import ValidationError

    from tidal_schemas.envelope import describe_validation_error
    from tidal_simulator.sources import synthetic_workload
    from tidal_simulator.synthetic import parse_spec

    text = args.synthetic or ""
    if "seed=" not in text:
        text = f"{text},seed={args.seed}" if text else f"seed={args.seed}"
    try:
        return synthetic_workload(parse_spec(text))
    except ValidationError as exc:
        raise CliError(f"--synthetic: {describe_validation_error(exc)}") from None
    except ValueError as exc:
        raise CliError(str(exc).splitlines()[0]) from None
