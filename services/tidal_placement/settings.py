"""Settings of the placement service (env prefix TIDAL_PLACEMENT_)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from tidal_runtime import ServiceSettings
from tidal_schemas.placement import MAX_DECISIONS

from .gpu_strategies import GPU_STRATEGIES


class PlacementSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_PLACEMENT_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = "placement"

    gpu_strategy: str = Field("fgd-cpu", description=f"one of {', '.join(sorted(GPU_STRATEGIES))}")
    permit_timeout_s: float = Field(30.0, gt=0, description="how long a waiting pod holds back its type")
    retry_backoff_s: float = Field(1.0, ge=0, description="a waiting pod is tried again no sooner than this after "
                                   "its first attempt, twice that after the second… (kube-scheduler's pod back-off)")
    retry_backoff_max_s: float = Field(10.0, ge=0, description="the longest back-off between a waiting pod's attempts")
    publish_window: int = Field(64, ge=1, le=MAX_DECISIONS, description="decisions of a cycle published as one "
                                "event (the cycle goes on once the broker has stored it)")
    bind_timeout_s: float = Field(60.0, gt=0, description="an assumed pod without a bind result is forgotten")
    takeover_settle_s: float = Field(3.0, ge=0, description="a replica that lost a fence waits this long "
                                     "(longer than a membership hand-over) before claiming again")
    workload_refresh: int = Field(500, ge=1, description="rebuild the typical workload every N pods seen "
                                  "(and after the 1st, 2nd, 4th… pod before that)")
    workload_drift: float = Field(0.05, ge=0, le=1, description="a rebuilt typical workload replaces the GPU "
                                  "strategy's only when this share of the pods' shapes moved since the strategy "
                                  "was built, plus, once it was built from a full window, what sampling alone "
                                  "moves (0 = whenever it changed): a new strategy scores every node state afresh")
    node_stale_after_s: float = Field(30.0, ge=0, description="a node without a usage sample for this long takes "
                                      "no new pods until it sends one (0 = never stale)")
    pending_repeat_s: float = Field(60.0, ge=0, description="a pod tried again with the same reasons gets its "
                                    "pending decision published again once this long has passed (0 = on every "
                                    "attempt): its FailedScheduling event counts the attempts")
    node_stale_check_s: float = Field(5.0, gt=0, description="how often nodes are checked for staleness")
    tenant_report_s: float = Field(2.0, gt=0, description="how often what each tenant holds is compared with "
                                   "the last tenant.usage, and published when it changed")

    @field_validator("gpu_strategy")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in GPU_STRATEGIES:
            raise ValueError(f"unknown GPU strategy {value!r}; known: {', '.join(sorted(GPU_STRATEGIES))}")
        return value
