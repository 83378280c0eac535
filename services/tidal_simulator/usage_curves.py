"""How much of its request a pod uses over simulated time (pure).

A curve gives the used fraction of a request at scenario time t (seconds
since the simulation started), before noise:

    constant:  f(t) = level
    diurnal:   f(t) = level + amplitude · sin(2π · (t + phase_s) / period_s)
    spike:     f(t) = peak   for start_s ≤ t < start_s + duration_s
                    = level  otherwise

Noise is multiplicative and drawn by the caller (a standard normal `z`, so
the randomness stays with whoever owns the seed):

    used(t) = max(0, f(t) · (1 + noise · z))
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


class _Curve(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    level: float = Field(0.5, ge=0, description="used fraction of the request")
    noise: float = Field(0.0, ge=0, description="relative standard deviation of the noise")


class Constant(_Curve):
    kind: Literal["constant"] = "constant"


class Diurnal(_Curve):
    kind: Literal["diurnal"] = "diurnal"
    amplitude: float = Field(0.2, ge=0)
    period_s: float = Field(86_400.0, gt=0)
    phase_s: float = 0.0


class Spike(_Curve):
    kind: Literal["spike"] = "spike"
    peak: float = Field(1.0, ge=0)
    start_s: float = Field(0.0, ge=0)
    duration_s: float = Field(60.0, gt=0)


def _kind(value: object) -> str:
    # A curve without `kind` is constant: `{level: 0.9}` reads as it should.
    if isinstance(value, dict):
        return value.get("kind", "constant")
    return getattr(value, "kind", "constant")


Curve = Annotated[Annotated[Constant, Tag("constant")] | Annotated[Diurnal, Tag("diurnal")]
                  | Annotated[Spike, Tag("spike")], Discriminator(_kind)]


class UsageSpec(BaseModel):
    """A pod's CPU and memory curves (fractions of its CPU / memory request)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Curve = Constant()
    memory: Curve = Constant()


def fraction_at(curve: Constant | Diurnal | Spike, t_s: float, z: float = 0.0) -> float:
    """The used fraction of the request at time `t_s` (see the module
    docstring), with the standard-normal draw `z` for the noise."""
    if isinstance(curve, Diurnal):
        base = curve.level + curve.amplitude * math.sin(2 * math.pi * (t_s + curve.phase_s) / curve.period_s)
    elif isinstance(curve, Spike):
        base = curve.peak if curve.start_s <= t_s < curve.start_s + curve.duration_s else curve.level
    else:
        base = curve.level
    return max(0.0, base * (1.0 + curve.noise * z))


def is_static(usage: UsageSpec) -> bool:
    """Whether the usage never changes with time (constant, no noise), so a
    node running only such pods need not be re-sampled until its pods change."""
    return all(isinstance(c, Constant) and c.noise == 0 for c in (usage.cpu, usage.memory))
