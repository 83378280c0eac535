"""Settings of the scoring service (env prefix TIDAL_SCORING_)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from tidal_runtime import ServiceSettings
from tidal_schemas.scores import PeakEstimator

from .durations import parse_duration


class ScoringSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TIDAL_SCORING_", extra="ignore", populate_by_name=True)
    config_section: ClassVar[str] = "scoring"

    period_s: float = Field(60.0, gt=0, description="fair-share update period Δt")
    settle_time: str = Field("7d", description="4T: time for a score to settle within 2 % after a change")
    peak_estimator: PeakEstimator = Field("percentile", description="how a node's peak usage is estimated: "
                                          "weighted (max), percentile (95th of the pods' sum) or statistical "
                                          "(mean + 3σ)")
    peak_window_s: float = Field(300.0, gt=0, description="the window of usage samples the peak is taken over")
    peak_min_samples: int = Field(3, ge=1, description="with fewer samples in the window a node has no peak "
                                  "estimate (never a made-up number)")
    weight_cpu: float | None = Field(None, ge=0, le=1, description="fixed w_cpu of the peak estimators (w_mem = "
                                     "1 - w_cpu); unset: each node's weights follow its pods' load profile (§D)")

    @field_validator("settle_time")
    @classmethod
    def _duration(cls, value: str) -> str:
        seconds = parse_duration(value)
        if not seconds:
            raise ValueError(f"settle_time {value!r}: expected a positive duration like 7d, 36h or 600s")
        return value

    @property
    def settle_time_s(self) -> float:
        seconds = parse_duration(self.settle_time)
        assert seconds is not None
        return seconds
