"""`tidal tenants apply FILE.yaml`: validate tenant configurations (GPU
groups, quotas, permissions), then publish them; a tenant's new
configuration replaces its previous one. `tidal tenants delete NAME…`
removes tenants (their last configuration is otherwise kept for ever);
`tidal tenants list` prints the configuration in force of each tenant.

For bus-only setups: on a cluster, `kubectl apply` the same content as
`Tenant` objects and the bridge publishes them. The file holds plain tenant
mappings or `Tenant` manifests (a `kind: List` of them, or YAML documents
separated by `---`): one rule reads both (`tidal_schemas.tenancy`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from pydantic import ValidationError

from tidal_runtime.settings import DEFAULT_CLUSTER
from tidal_schemas import TenantConfig, make_envelope
from tidal_schemas.envelope import describe_validation_error
from tidal_schemas.tenancy import TenantDocumentError, deprecated_keys, tenant_config, tenant_deletion

from .errors import CliError
from .files import check_publishable, read_items
from .options import add_bus_options, bus_for
from .output import add_output_option, emit


def add(subparsers) -> None:
    tenants = subparsers.add_parser("tenants", help="tenant GPU groups, quotas and permissions")
    verbs = tenants.add_subparsers(dest="verb", required=True, metavar="{apply,delete,list}")
    apply = verbs.add_parser("apply", help="validate a YAML file of tenants, then publish it",
                             description="FILE holds one tenant mapping or a list of them (fields of the "
                                         "tenant.config event: tenant, permissions, quota, groups or "
                                         "auto_grouping), or Tenant manifests (tidal.dev/v1alpha1, the same "
                                         "fields in camelCase under spec), as kubectl takes them. Nothing is "
                                         "published unless every tenant is valid.")
    apply.add_argument("file", type=Path)
    add_bus_options(apply)
    apply.set_defaults(func=run_apply)
    delete = verbs.add_parser("delete", help="remove tenants: their quota, permissions and groups",
                              description="Publishes a deletion for each NAME; placement drops the tenant's "
                                          "configuration. Its pods stay where they are.")
    delete.add_argument("names", nargs="+", metavar="NAME")
    add_bus_options(delete)
    delete.set_defaults(func=run_delete)
    listing = verbs.add_parser("list", help="each tenant's configuration in force, from the bus",
                               description="Reads tenant.config (the last configuration of each tenant is kept) "
                                           "and prints the tenants not deleted, for --cluster.")
    add_output_option(listing)
    add_bus_options(listing)
    listing.set_defaults(func=run_list)


def load_tenants(path: Path, cluster: str = DEFAULT_CLUSTER) -> list[TenantConfig]:
    """Every tenant in the file, validated and publishable in `cluster`;
    CliError naming the first problem. A manifest's deprecated snake_case
    keys are read, each with a warning on stderr (when all are valid)."""
    items = []
    for item in read_items(path, "tenants", stream=True):
        if isinstance(item, dict) and item.get("kind") == "List":
            if not isinstance(item.get("items") or [], list):
                raise CliError(f"{path}: the items of a List must be a list")
            items += item.get("items") or []
        else:
            items.append(item)
    if not items:
        raise CliError(f"{path}: no tenants in the file")
    tenants, seen, warnings = [], set(), []
    for number, item in enumerate(items, 1):
        where = f"{path}: tenant {number}" if len(items) > 1 else str(path)
        try:
            config = tenant_config(item)
        except TenantDocumentError as exc:
            raise CliError(f"{where}: {exc}") from None
        warnings += [f"{where}: warning: {warning}" for warning in deprecated_keys(item)]
        if config.tenant in seen:
            raise CliError(f"{where}: tenant {config.tenant!r} appears twice")
        check_publishable(make_envelope(config, cluster=cluster, source="cli"), where)
        seen.add(config.tenant)
        tenants.append(config)
    for warning in warnings:  # once every tenant is valid: a refusal stays one line
        print(warning, file=sys.stderr)
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
            deletions.append(tenant_deletion(name))
        except ValidationError as exc:
            raise CliError(f"tenant {name!r}: {describe_validation_error(exc)}") from None
    asyncio.run(_publish(args, deletions))
    print(f"deleted {len(deletions)} tenant(s): {', '.join(d.tenant for d in deletions)}")
    return 0


async def _publish(args: argparse.Namespace, configs: list[TenantConfig]) -> None:
    async with bus_for(args) as bus:
        for config in configs:
            await bus.publish(config)


def run_list(args: argparse.Namespace) -> int:
    from tidal_bus import StartAt
    from tidal_schemas import SchemaError

    async def read() -> dict[str, TenantConfig]:
        latest: dict[str, TenantConfig] = {}
        async with bus_for(args, read_only=True) as bus:
            async for _, event in bus.read("tenant.config", StartAt.earliest()):
                if not isinstance(event, SchemaError) and event.cluster == args.cluster:
                    latest[event.payload.tenant] = event.payload
        return {name: config for name, config in sorted(latest.items()) if not config.deleted}

    tenants = asyncio.run(read())
    document = {"cluster": args.cluster, "items": [
        t.model_dump(mode="json", exclude={"deleted"}, exclude_defaults=True) | {"tenant": t.tenant}
        for t in tenants.values()]}
    emit(args, document, lambda: tenant_table(list(tenants.values())))
    return 0


def tenant_table(tenants: list[TenantConfig]) -> str:
    """TENANT, QUOTA, GROUPS, NODES and GPUS permitted: one row a tenant."""
    rows = [("TENANT", "QUOTA", "GROUPS", "NODES", "GPUS")] + [
        (t.tenant, ",".join(f"{k}={v}" for k, v in sorted(t.quota.items())) or "-",
         ",".join(g.name for g in t.groups) or ("auto" if t.auto_grouping else "-"),
         ",".join(t.permissions.nodes) or "any", ",".join(t.permissions.gpus) or "any") for t in tenants]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
