"""What the `Tenant` CRD adds to the schema generated from the models.

- The cross-field rules of `TenantConfig` (group names unique; groups or
  autoGrouping, not both) as CEL `x-kubernetes-validations`, so that the
  API server refuses such an object at admission instead of the bridge
  reporting `Ready=False` afterwards. `RULES` lists each with the schema
  node it sits on (a dotted path below the object's root).
- The snake_case spellings the spec had before v1alpha1 went camelCase
  (`auto_grouping`, `gpus_per_container`, …), kept for one release as
  deprecated properties: the API server prunes what its schema does not
  name, even from objects already stored, so dropping them at once would
  silently empty the grouping of every Tenant applied before the upgrade.
  A rule refuses an object that gives both spellings of one field.

CEL cost: the API server estimates a rule's worst case from the schema's
bounds and refuses a CRD whose rule could cost more than 10^7. The unique
names rule compares every pair of groups: with `MAX_GROUPS` = 256 and names
of at most 253 characters that is 256² comparisons of about 30 units each,
about 2·10^6.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pydantic.alias_generators import to_snake

MAX_GROUPS = 256
"""Groups a `Tenant` object holds at most (the CEL cost bound above)."""


@dataclass(frozen=True)
class Rule:
    """One CEL validation: `rule` must hold for `self` at schema node `at`."""

    at: str  # "spec", "spec.groups": properties below the root, dots between
    rule: str
    message: str

    def validation(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


RULES = (
    Rule("spec.groups", "self.all(g, self.exists_one(h, h.name == g.name))", "group names must be unique"),
    Rule("spec", "!(has(self.groups) && size(self.groups) > 0 && (has(self.autoGrouping) || has(self.auto_grouping)))",
         "give either groups (manual) or autoGrouping, not both"),
)


def deprecated_spellings(node: dict[str, Any]) -> list[tuple[str, str]]:
    """Add, in a structural schema node and every node below it, each
    camelCase property's former snake_case spelling (the same schema,
    marked deprecated) and a rule refusing both at once; the (old, new)
    pairs added, outermost first."""
    pairs: list[tuple[str, str]] = []
    for sub in (node.get("properties") or {}).values():
        pairs += deprecated_spellings(sub)
    if isinstance(node.get("items"), dict):
        pairs += deprecated_spellings(node["items"])
    properties = node.get("properties") or {}
    here = [(to_snake(name), name) for name in properties if to_snake(name) != name]
    for old, new in here:
        deprecated = copy.deepcopy(properties[new])
        deprecated["description"] = (f"Deprecated: the former spelling of {new}, read until the next release. "
                                     + properties[new].get("description", "")).strip()
        properties[old] = deprecated
        node.setdefault("x-kubernetes-validations", []).append(
            {"rule": f"!(has(self.{new}) && has(self.{old}))",
             "message": f"{old} is the deprecated spelling of {new}: give {new} only"})
    return here + pairs


def node_at(schema: dict[str, Any], at: str) -> dict[str, Any]:
    """The schema node at a dotted path of properties below `schema`."""
    for name in at.split("."):
        schema = schema["properties"][name]
    return schema


def add_rules(schema: dict[str, Any]) -> None:
    """Put every rule of `RULES` on its node of an object's schema."""
    for rule in RULES:
        node_at(schema, rule.at).setdefault("x-kubernetes-validations", []).append(rule.validation())


def list_map(node: dict[str, Any], *keys: str) -> None:
    """Mark an array of objects as a map keyed by `keys` (as
    `metav1.Condition` lists are by type): server-side apply merges its
    items by key, and the API server refuses two items with one key."""
    node["x-kubernetes-list-type"] = "map"
    node["x-kubernetes-list-map-keys"] = list(keys)
