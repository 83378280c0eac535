"""Settings of the remediation service (env prefix TIDAL_REMEDIATION_)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tidal_policy.action_modes import ENABLED, ActionMode, dry_run_kinds
from tidal_runtime import ServiceSettings

from .policy_settings import PolicySettings


class RemediationSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_REMEDIATION_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = "remediation"

    high_threshold: float = Field(0.80, gt=0, le=1, description="a NUMA node whose load (fraction of its CPUs) "
                                  "is above this is hot: best-effort pods on it are frozen, then pods moved off")
    low_threshold: float = Field(0.60, gt=0, lt=1, description="below this load a NUMA node is cold: frozen pods "
                                 "on it are thawed (must be below high_threshold)")
    cool_down_s: float = Field(30.0, ge=0, description="no action on a NUMA node this soon after its last one")
    max_actions_per_round: int = Field(3, ge=1, description="actions planned for one node per round at most")
    freeze: ActionMode = Field("dry-run", description="freezing best-effort pods on a hot NUMA node. dry-run "
                               "(the default): decided, logged, counted and published marked dry_run, and the "
                               "node agent freezes nothing; enabled: the node agent freezes them. Dry-run until "
                               "an operator has watched the would-be freezes, since a frozen pod stops running. "
                               "A thaw always acts: it only undoes a freeze")
    migrate: ActionMode = Field("dry-run", description="moving latency-sensitive pods to a quieter NUMA node "
                                "(a new cpuset) once no best-effort pod there is left to freeze. dry-run (the "
                                "default) or enabled, as freeze; on a NUMA node with best-effort pods it acts "
                                "only with freeze enabled too (their freezes come first)")
    dry_run: bool = Field(False, description="deprecated, removed in the next release: true makes every action "
                          "dry-run, thaws included, whatever freeze and migrate say")
    enabled: bool = Field(True, description="false: plan nothing (the service still runs and reports)")
    action_timeout_s: float = Field(60.0, gt=0, description="an action without an answer from the node agent "
                                    "is retried after this long")
    max_retries: int = Field(2, ge=0, description="retries of an unanswered action before it is given up")
    retry_check_s: float = Field(5.0, gt=0, description="how often unanswered actions are looked at")
    topology_wait_s: float = Field(10.0, gt=0, description="how long a node's first sample waits for its "
                                   "topology (read by another consumer); a node still without one is refused")

    def dry_run_kinds(self) -> frozenset[str]:
        """The action kinds remediation publishes dry-run (see `freeze`, `migrate`)."""
        return dry_run_kinds({"freeze": self.freeze, "set-cpuset": self.migrate, "thaw": ENABLED}, self.dry_run)

    def policy(self) -> PolicySettings:
        return PolicySettings(high_threshold=self.high_threshold, low_threshold=self.low_threshold,
                              cool_down_s=self.cool_down_s, max_actions_per_round=self.max_actions_per_round,
                              dry_run=self.dry_run_kinds(), enabled=self.enabled, action_timeout_s=self.action_timeout_s,
                              max_retries=self.max_retries)
