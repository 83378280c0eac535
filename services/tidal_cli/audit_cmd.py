"""`tidal audit`: check a cluster's streams against the §F guarantees
(`tidal_audit`), live on a bus or from a recording (the data dir of a
stopped embedded stack, e.g. `.tidal/simulate`). One line per violation,
with the events that prove it; exit 1 when there is any, 0 when none."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from .errors import CliError
from .options import add_bus_options, bus_for
from .output import add_output_option, emit


def add(subparsers) -> None:
    p = subparsers.add_parser(
        "audit", help="check a cluster's streams against Tidal's guarantees",
        description="Read every stream of a cluster from the earliest event and check: no pod placed twice under "
                    "the same fence; per node, NUMA node and GPU nothing held beyond allocatable (foreign pods "
                    "counted); no CPU in two exclusive sets; tenant quotas at every instant; every eviction, "
                    "freeze and move eligible and decided once; every failed bind rolled back.")
    add_bus_options(p)
    p.add_argument("--recording", type=Path, metavar="DATA_DIR",
                   help="audit a stopped embedded stack's recording (serves DATA_DIR/nats) instead of --bus")
    add_output_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.recording is None:
        violations = asyncio.run(_audit(args))
    else:
        from tidal_bus.embedded import EmbeddedNats

        store = args.recording / "nats"
        if not (store / "jetstream").is_dir():
            raise CliError(f"--recording {args.recording}: no nats-server store there (expected {store}/jetstream)")
        server = EmbeddedNats(store).start()
        try:
            args.bus = server.url
            violations = asyncio.run(_audit(args))
        finally:
            server.stop()
    document = {"cluster": args.cluster, "violations": [
        {"invariant": v.invariant, "message": v.message, "evidence": list(v.evidence)} for v in violations]}
    emit(args, document, lambda: "\n".join([v.line() for v in violations]
                                           + [f"invariant violations: {len(violations)}"]))
    return 1 if violations else 0


async def _audit(args: argparse.Namespace):
    from tidal_audit.registry import audit
    from tidal_audit.streams import read_streams

    async with bus_for(args, source="audit", read_only=True) as bus:
        events = await read_streams(bus)
    return audit(events, cluster=args.cluster)
