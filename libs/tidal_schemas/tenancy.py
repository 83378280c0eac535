"""What a tenant holds, as placement counts it, and the Kubernetes custom
resources that show it (`Tenant`, `FairShare`; their CRDs are generated
from these models by `crd.py`).

One rule reads a tenant from a document, whoever wrote it: `tidal tenants
apply` (a file of plain tenant mappings or of `Tenant` manifests) and the
bridge (a `Tenant` object) both call `tenant_config`, so a quota that one
accepts the other accepts too; both delete with `tenant_deletion`. A
`Tenant`'s spec is camelCase; its former snake_case keys are still read,
and `deprecated_keys` names them for a warning (see `spellings`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from .common import GPU_MILLI, Name, NonNegInt
from .crd_rules import MAX_GROUPS
from .envelope import Payload, register
from .errors import one_line
from .pod import TenantConfig
from .resource_type import CPU_TYPE, GPU_TYPE
from .spellings import old_spellings
from .strict import unknown_field

GROUP = "tidal.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
NOT_IN_SPEC = ("tenant", "deleted")
"""TenantConfig fields a `Tenant`'s spec does not hold: the name is the
object's, and deleting the object deletes the tenant."""


@register
class TenantUsage(Payload):
    """What one tenant holds in a cluster against its quota, and which of
    its GPU groups have whole GPUs free; published by the placement leader
    when it changes (the bridge writes it to the `Tenant`'s status)."""

    TYPE = "tenant.usage"

    tenant: Name
    held: dict[str, NonNegInt] = Field(
        default_factory=dict, description="per resource type, as quota counts it: 'cpu' (milli-CPU), 'memory' "
        "(MiB), each GPU model and 'gpu' (milli-GPU)")
    quota: dict[str, NonNegInt] = Field(default_factory=dict, description="the limits in force")
    groups_free: dict[str, NonNegInt] = Field(default_factory=dict,
                                              description="per GPU group: whole GPUs free in it")
    measured_at: AwareDatetime

    def event_key(self) -> str:
        return self.tenant


class TenantDocumentError(ValueError):
    """Why a document is not a tenant: `field` is the dotted path at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field {one_line(field, 200)!r}: {message}" if field else message)
        self.field, self.message = field, message


def tenant_config(document: Any) -> TenantConfig:
    """The tenant a document describes: a `Tenant` manifest (name from
    `metadata.name`, the rest from `spec`) or a plain tenant mapping (the
    fields of the `tenant.config` event). Unknown fields are refused, as
    in every file an operator types, and so is a field given in both its
    spellings (`autoGrouping` and `auto_grouping`); TenantDocumentError
    names the field."""
    if not isinstance(document, dict):
        raise TenantDocumentError("", f"a tenant must be a mapping, got {type(document).__name__}")
    prefix, item = "", document
    if "kind" in document or "apiVersion" in document:
        if document.get("kind") != "Tenant" or str(document.get("apiVersion", "")).split("/")[0] != GROUP:
            raise TenantDocumentError("kind", f"expected kind Tenant of {API_VERSION}, got "
                                      f"{one_line(str(document.get('kind')), 60)} of "
                                      f"{one_line(str(document.get('apiVersion')), 60)}")
        spec = document.get("spec") or {}
        if not isinstance(spec, dict):
            raise TenantDocumentError("spec", "must be a mapping")
        for key in NOT_IN_SPEC:
            if key in spec:
                raise TenantDocumentError(f"spec.{key}", "not a field of a Tenant's spec")
        if isinstance(spec.get("groups"), list) and len(spec["groups"]) > MAX_GROUPS:
            raise TenantDocumentError("spec.groups", f"a Tenant holds at most {MAX_GROUPS} groups, got "
                                      f"{len(spec['groups'])}")
        meta = document.get("metadata") or {}
        if not isinstance(meta, dict):
            raise TenantDocumentError("metadata", "must be a mapping")
        prefix, item = "spec.", {**spec, "tenant": meta.get("name")}
    unknown = unknown_field(TenantConfig, item)
    if unknown:  # the wire tolerates new fields; a document with a typo (`qouta:`) must not pass
        raise TenantDocumentError(prefix + unknown, "not a field of a tenant (a typo?)")
    for old in old_spellings(TenantConfig, item, prefix.rstrip(".")):
        if old.both:
            new = old.new.rsplit(".", 1)[-1]
            raise TenantDocumentError(old.old, f"the deprecated spelling of {new}: give {new} only")
    try:
        return TenantConfig.model_validate(item)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"])
        where = "metadata.name" if prefix and loc == "tenant" else prefix + loc if loc else prefix.rstrip(".")
        message = first["msg"].removeprefix("Value error, ")
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise TenantDocumentError(where, one_line(message + more)) from None


def deprecated_keys(document: Any) -> list[str]:
    """A warning for each former snake_case key of a `Tenant` manifest
    (none for a plain tenant mapping, whose fields are the event's)."""
    if not isinstance(document, dict) or "kind" not in document or not isinstance(document.get("spec"), dict):
        return []
    return [old.warning() for old in old_spellings(TenantConfig, document["spec"], "spec")]


def tenant_deletion(name: str) -> TenantConfig:
    """The event that deletes a tenant (ValidationError for a name no tenant can have)."""
    return TenantConfig(tenant=name, deleted=True)


def gpu_summary(held: dict[str, int], quota: dict[str, int]) -> str:
    """GPUs held per model against quota, in whole GPUs, for a printer
    column: "A100 2/4, T4 0.5" (a model without a limit shows no "/")."""
    models = sorted(k for k in {*held, *quota} if k not in (CPU_TYPE, "memory", GPU_TYPE))
    models += [GPU_TYPE] if GPU_TYPE in quota else []  # the all-models limit
    parts = []
    for model in models:
        text = f"{model} {held.get(model, 0) / GPU_MILLI:g}"
        parts.append(text + (f"/{quota[model] / GPU_MILLI:g}" if model in quota else ""))
    return ", ".join(parts) or "none"


def fair_share_name(user: str) -> str:
    """The object name of a user's `FairShare`: the user name when it is a
    valid Kubernetes name, else a cleaned form with a short hash (two users
    never share one)."""
    if re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", user):
        return user
    cleaned = re.sub(r"[^a-z0-9.-]+", "-", user.lower()).strip("-.")[:200] or "user"
    return f"{cleaned}-{hashlib.sha256(user.encode()).hexdigest()[:8]}"


class StatusRecord(BaseModel):
    """Base of the custom resources' parts: camelCase on the wire, as
    Kubernetes objects are."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class Condition(StatusRecord):
    """A status condition, as metav1.Condition."""

    type: str = Field(min_length=1)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(min_length=1)
    message: str = ""
    last_transition_time: AwareDatetime
    observed_generation: NonNegInt = 0


class TenantStatus(StatusRecord):
    """A `Tenant`'s status: what it holds against its quota (from
    `tenant.usage`) and whether its spec was accepted (condition Ready)."""

    held: dict[str, NonNegInt] = Field(default_factory=dict, description="per resource type, as quota counts it")
    quota: dict[str, NonNegInt] = Field(default_factory=dict, description="the limits placement applies")
    gpus: str = Field("", description="GPUs held per model against quota, in whole GPUs")
    free_groups: list[str] = Field(default_factory=list, description="GPU groups with at least one whole GPU free")
    free_group_count: NonNegInt = 0
    updated_at: AwareDatetime | None = None
    conditions: list[Condition] = Field(default_factory=list)


class FairShareSpec(StatusRecord):
    """Whose record it is (object names cannot hold every user name)."""

    user: Name


class FairShareStatus(StatusRecord):
    """A user's fair-share scores (lower is served first) and decayed usage,
    per resource type, from `score.user`."""

    scores: dict[str, float] = Field(default_factory=dict)
    usage: dict[str, float] = Field(default_factory=dict)
    last_update: AwareDatetime | None = None
