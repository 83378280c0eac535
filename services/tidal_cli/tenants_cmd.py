"""`tidal tenants apply FILE.yaml`: validate tenant configurations (GPU
groups, quotas, permissions), then publish them; a tenant's new
configuration replaces its previous one. `tidal tenants delete NAME…`
removes tenants (their last configuration is otherwise kept for ever)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from pydantic import ValidationError

from tidal_schemas import TenantConfig, make_envelope
from tidal_schemas.envelope import describe_validation_error
from tidal_schemas.strict import unknown_field

from .errors import CliError
from .files import check_publishable, read_items
from .options import add_bus_options, bus_for


def add(subparsers) -> None:
    tenants = subparsers.add_parser("tenants", help="tenant GPU groups, quotas and permissions")
    verbs = tenants.add_subparsers(dest="verb", required=True, metavar="{apply,delete}")
    apply = verbs.add_parser("apply", help="validate a YAML file of tenants, then publish it",
                             description="FILE holds one tenant mapping or a list of them (fields of the "
                                         "tenant.config event: tenant, permissions, quota, groups or "
                                         "auto_grouping). Nothing is published unless every tenant is valid.")
    apply.add_argument("file", type=Path)
    add_bus_options(apply)
    apply.set_defaults(func=run_apply)
    delete = verbs.add_parser("delete", help="remove tenants: their quota, permissions and groups",
                              description="Publishes a deletion for each NAME; placement drops the tenant's "
                                          "configuration. Its pods stay where they are.")
    delete.add_argument("names", nargs="+", metavar="NAME")
    add_bus_options(delete)
    delete.set_defaults(func=run_delete)


def load_tenants(path: Path, cluster: str = "local") -> list[TenantConfig]:
    """Every tenant in the file, validated and publishable in `cluster`;
    CliError naming the first problem."""
    items = read_items(path, "tenants")
    tenants, seen = [], set()
    for number, item in enumerate(items, 1):
        where = f"{path}: tenant {number}" if len(items) > 1 else str(path)
        if not isinstance(item, dict):
            raise CliError(f"{where}: a tenant must be a mapping, got {type(item).__name__}")
        unknown = unknown_field(TenantConfig, item)
        if unknown:  # the wire tolerates new fields; a file with a typo (`qouta:`) must not pass
            raise CliError(f"{where}: field {unknown!r}: not a field of a tenant (a typo?)")
        try:
            config = TenantConfig.model_validate(item)
        except ValidationError as exc:
            raise CliError(f"{where}: {describe_validation_error(exc)}") from None
        if config.tenant in seen:
            raise CliError(f"{where}: tenant {config.tenant!r} appears twice")
        check_publishable(make_envelope(config, cluster=cluster, source="cli"), where)
        seen.add(config.tenant)
        tenants.append(config)
    return tenants


def run_apply(args: argparse.Namespace) -> int:
    tenants = load_tenants(args.file, args.cluster)
    asyncio.run(_publish(args, tenants))
    print(f"applied {len(tenants)} tenant(s): {', '.join(t.tenant for t in tenants)}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    deletions = []
    for name in args.names:
        try:
            deletions.append(TenantConfig(tenant=name, deleted=True))
        except ValidationError as exc:
            raise CliError(f"tenant {name!r}: {describe_validation_error(exc)}") from None
    asyncio.run(_publish(args, deletions))
    print(f"deleted {len(deletions)} tenant(s): {', '.join(d.tenant for d in deletions)}")
    return 0


async def _publish(args: argparse.Namespace, configs: list[TenantConfig]) -> None:
    async with bus_for(args) as bus:
        for config in configs:
            await bus.publish(config)
