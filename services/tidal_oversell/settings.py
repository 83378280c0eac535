"""Settings of the oversell service (env prefix TIDAL_OVERSELL_)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from tidal_runtime import ServiceSettings
from tidal_schemas import STOP_SCHEDULING_TAINT
from tidal_schemas.node import OversellPolicy

from .bounded import BoundedSettings
from .factor import FactorSettings

Policy = OversellPolicy
TAINT_KEY = STOP_SCHEDULING_TAINT


class OversellSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_OVERSELL_", extra="ignore", populate_by_name=True)

    default_policy: Policy = "factor"
    pool_policies: dict[str, Policy] = Field(default_factory=dict, description='per node pool, e.g. {"gpu": "none"}')
    min_factor: float = Field(1.0, ge=1.0)
    max_factor: float = Field(1.5, ge=1.0)
    max_rise_per_update: float = Field(0.05, gt=0)
    warmup_s: float = Field(600.0, ge=0)
    bounded_threshold: float = Field(0.75, gt=0, le=1)
    bounded_w: float = Field(1.5, gt=1)
    bounded_floor: float = Field(0.8, ge=0.5, le=1.0)
    stop_threshold: float = Field(0.85, gt=0, le=1)
    hysteresis: float = Field(0.05, ge=0)
    evict_fraction: float = Field(0.95, gt=0, le=1)
    max_evictions_per_round: int = Field(3, ge=1)
    eviction_cooldown_s: float = Field(60.0, ge=0)
    eviction_timeout_s: float = Field(300.0, gt=0, description="an eviction without the pod gone is retried after")
    dry_run: bool = False
    topology_wait_s: float = Field(10.0, gt=0, description="how long a node's first sample waits for its "
                                   "topology (read by another consumer); a node still without one is refused")

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
