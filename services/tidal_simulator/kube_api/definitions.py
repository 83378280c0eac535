"""A registered CustomResourceDefinition, as far as the simulated API server
serves it (pure): one served and stored version, its schema (structural,
or the definition is refused), printer columns and status subresource."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .openapi import structural_problems


@dataclass
class Crd:
    """What the server needs of one registered definition (its served version)."""

    document: dict[str, Any]
    group: str
    plural: str
    kind: str
    namespaced: bool
    version: str
    schema: dict[str, Any]
    columns: list[dict[str, Any]] = field(default_factory=list)
    status_subresource: bool = False

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @classmethod
    def parse(cls, doc: dict[str, Any]) -> "Crd":
        """ValueError with the API server's wording when `doc` is not acceptable."""
        spec, names = doc.get("spec") or {}, (doc.get("spec") or {}).get("names") or {}
        for key, value in (("spec.group", spec.get("group")), ("spec.names.plural", names.get("plural")),
                           ("spec.names.kind", names.get("kind")), ("spec.scope", spec.get("scope"))):
            if not value:
                raise ValueError(f"{key}: Required value")
        if (doc.get("metadata") or {}).get("name") != f"{names['plural']}.{spec['group']}":
            raise ValueError("metadata.name: Invalid value: must be spec.names.plural+\".\"+spec.group")
        served = [v for v in spec.get("versions") or [] if v.get("served") and v.get("storage")]
        if len(served) != 1:
            raise ValueError("spec.versions: Invalid value: exactly one version must be served and stored")
        version = served[0]
        schema = ((version.get("schema") or {}).get("openAPIV3Schema"))
        if not isinstance(schema, dict):
            raise ValueError("spec.versions[0].schema.openAPIV3Schema: Required value")
        problems = structural_problems(schema, "spec.validation.openAPIV3Schema")
        if problems:
            raise ValueError(", ".join(problems))
        return cls(doc, spec["group"], names["plural"], names["kind"], spec["scope"] == "Namespaced",
                   version["name"], schema, list(version.get("additionalPrinterColumns") or []),
                   "status" in (version.get("subresources") or {}))
