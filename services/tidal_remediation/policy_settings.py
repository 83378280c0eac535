"""The knobs of the remediation policy, validated once at construction.

The service maps its pydantic-settings class (env prefix) onto this plain
value, so the policy never reads the environment and tests inject it.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HIGH = 0.80
DEFAULT_LOW = 0.60


@dataclass(frozen=True)
class PolicySettings:
    """Thresholds (NUMA load fractions), guard rails and retry policy.

    A NUMA node is hot when its load > `high_threshold` and cold (thaw may
    start) when its load < `low_threshold`; the gap between them is the
    hysteresis that keeps a node from flapping between freeze and thaw.
    """

    high_threshold: float = DEFAULT_HIGH
    low_threshold: float = DEFAULT_LOW
    cool_down_s: float = 30.0
    max_actions_per_round: int = 3
    dry_run: frozenset[str] = frozenset()  # the action kinds planned marked dry-run
    enabled: bool = True
    thaw_unrecorded_frozen: bool = True
    action_timeout_s: float = 60.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.low_threshold < self.high_threshold <= 1:
            raise ValueError(f"need 0 < low < high <= 1, got low={self.low_threshold}, high={self.high_threshold}")
        if self.cool_down_s < 0:
            raise ValueError(f"cool_down_s must be >= 0, got {self.cool_down_s}")
        if self.max_actions_per_round < 1:
            raise ValueError(f"max_actions_per_round must be >= 1, got {self.max_actions_per_round}")
        if self.action_timeout_s <= 0:
            raise ValueError(f"action_timeout_s must be > 0, got {self.action_timeout_s}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
