"""Settings of the oversell service (env prefix TIDAL_OVERSELL_)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from tidal_policy.action_modes import ActionMode, dry_run_kinds
from tidal_runtime import ServiceSettings
from tidal_schemas import STOP_SCHEDULING_TAINT
from tidal_schemas.node import OversellPolicy

from .bounded import BoundedSettings
from .factor import FactorSettings

Policy = OversellPolicy
TAINT_KEY = STOP_SCHEDULING_TAINT


class OversellSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_OVERSELL_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = "oversell"

    default_policy: Policy = Field("factor", description="how a node's allocatable is oversold: factor "
                                   "(requests / peak, clamped), bounded (capped by how much of what is "
                                   "allocated is used) or none")
    pool_policies: dict[str, Policy] = Field(default_factory=dict, description='per node pool, e.g. {"gpu": "none"}')
    min_factor: float = Field(1.0, ge=1.0, description="factor policy: the lowest oversell factor "
                              "(allocatable = reserved × factor)")
    max_factor: float = Field(1.5, ge=1.0, description="factor policy: the highest oversell factor")
    max_rise_per_update: float = Field(0.05, gt=0, description="factor policy: how much the factor may rise "
                                       "per update (it falls at once)")
    warmup_s: float = Field(600.0, ge=0, description="factor policy: while a pod on the node is younger than "
                            "this, the factor is 1 (its requests are the prediction)")
    bounded_threshold: float = Field(0.75, gt=0, le=1, description="bounded policy: above this load (fraction of "
                                     "capacity) allocatable is the capacity, not oversold")
    bounded_w: float = Field(1.5, gt=1, description="bounded policy: the cap w, allocatable at most w × capacity")
    bounded_floor: float = Field(0.8, ge=0.5, le=1.0, description="bounded policy: allocatable at least this "
                                 "fraction of capacity")
    stop_threshold: float = Field(0.85, gt=0, le=1, description="memory utilisation (used / allocatable) at "
                                  "which the node is tainted to stop taking pods")
    hysteresis: float = Field(0.05, ge=0, description="the taint is removed only below stop_threshold − this "
                              "(a node hovering at the threshold does not flap)")
    evict_fraction: float = Field(0.95, gt=0, le=1, description="pods are evicted once memory used reaches this "
                                  "fraction of the node's memory limit")
    max_evictions_per_round: int = Field(3, ge=1, description="evictions asked for one node per sample at most")
    eviction_cooldown_s: float = Field(60.0, ge=0, description="no new eviction on a node this soon after its "
                                       "last one")
    eviction_timeout_s: float = Field(300.0, gt=0, description="an eviction without the pod gone is retried after")
    evict: ActionMode = Field("dry-run", description="evictions past evictFraction. dry-run (the default): "
                              "decided, logged, counted and published marked dry_run, and the bridge evicts "
                              "nothing; enabled: the bridge evicts through the Eviction API. Dry-run until an "
                              "operator has watched the would-be evictions, since an eviction kills a running pod")
    taint: ActionMode = Field("enabled", description="the stop-scheduling taint past stopThreshold and its "
                              "removal. Enabled by default: it only keeps new pods off the node, touches no "
                              "running pod, and oversell removes it itself below stopThreshold − hysteresis")
    dry_run: bool = Field(False, description="deprecated, removed in the next release: true makes every action "
                          "dry-run, taints included, whatever evict and taint say")
    topology_wait_s: float = Field(10.0, gt=0, description="how long a node's first sample waits for its "
                                   "topology (read by another consumer); a node still without one is refused")

    def dry_run_kinds(self) -> frozenset[str]:
        """The action kinds oversell publishes dry-run (see `evict`, `taint`)."""
        return dry_run_kinds({"evict": self.evict, "taint": self.taint, "untaint": self.taint}, self.dry_run)

    def policy_for(self, pool: str) -> Policy:
        return self.pool_policies.get(pool, self.default_policy)

    def factor(self) -> FactorSettings:
        return FactorSettings(min_factor=self.min_factor, max_factor=self.max_factor,
                              max_rise_per_update=self.max_rise_per_update, warmup_s=self.warmup_s)

    def bounded(self) -> BoundedSettings:
        return BoundedSettings(threshold=self.bounded_threshold, w=self.bounded_w, floor_fraction=self.bounded_floor)

    @model_validator(mode="after")
    def _hysteresis_below_stop(self) -> "OversellSettings":
        # untaint happens below stop − hysteresis: that point must exist
        if self.hysteresis >= self.stop_threshold:
            raise ValueError(f"hysteresis ({self.hysteresis}) must be below stop_threshold ({self.stop_threshold})")
        return self
