"""Oversell factor, clamping, smoothing and warm-up (SPEC §D, seed 003)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from tidal_oversell.factor import (
    FactorSettings,
    clamp_factor,
    decide_factor,
    next_factor,
    oversell_factor,
    scaled,
    warming_up,
)

GIB = 1024  # MiB
NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
LONG_AGO = [NOW - timedelta(days=3)]


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


# --- the seed's worked example

def test_worked_example_factor_and_allocatable_before_clamping():
    # 50 GiB requested / 20 GiB peak = 2.5; 128 GiB reserved × 2.5 = 320 GiB
    factor = oversell_factor(50 * GIB, 20 * GIB)
    assert factor == 2.5
    assert scaled(128 * GIB, factor) == 320 * GIB


def test_worked_example_after_clamping_to_the_default_range():
    # 2.5 clamped to [1.0, 1.5] = 1.5; 128 GiB × 1.5 = 192 GiB
    factor = clamp_factor(oversell_factor(50 * GIB, 20 * GIB), 1.0, 1.5)
    assert factor == 1.5
    assert scaled(128 * GIB, factor) == 192 * GIB


@pytest.mark.parametrize("requested, peak, expected", [
    (30.0, 20.0, 1.5),
    (10.0, 20.0, 0.5),         # using more than requested: below 1
    (0.0, 20.0, 0.0),          # nothing requested
    (0.0, 0.0, 0.0),
    (10.0, 0.0, math.inf),     # requested but unused
])
def test_oversell_factor(requested, peak, expected):
    assert oversell_factor(requested, peak) == expected


def test_oversell_factor_rejects_negative_figures():
    with pytest.raises(ValueError):
        oversell_factor(-1.0, 5.0)


@pytest.mark.parametrize("raw, expected", [(0.5, 1.0), (1.2, 1.2), (2.5, 1.5), (math.inf, 1.5), (0.0, 1.0)])
def test_clamp_factor(raw, expected):
    assert clamp_factor(raw, 1.0, 1.5) == expected


def test_scaled_rounds_down():
    # 3333 × 1.5 = 4999.5 → 4999: never grant a fraction that is not there
    assert scaled(3333, 1.5) == 4999


# --- smoothing: fall at once, rise slowly

@pytest.mark.parametrize("previous, target, max_rise, expected", [
    (1.4, 1.1, 0.05, 1.1),    # usage rose: take the lower target at once
    (1.5, 1.0, 0.05, 1.0),
    (1.1, 1.5, 0.05, 1.15),   # usage fell: rise by at most 0.05
    (1.48, 1.5, 0.05, 1.5),   # the last small step lands on the target
    (1.2, 1.2, 0.05, 1.2),
    (1.0, 1.5, 0.0, 1.0),     # rising switched off
])
def test_next_factor(previous, target, max_rise, expected):
    assert next_factor(previous, target, max_rise) == pytest.approx(expected)


def test_factor_climbs_to_the_cap_in_steps_then_drops_in_one():
    settings = FactorSettings(max_rise_per_update=0.1)
    factor, seen = None, []
    for _ in range(7):  # peak 20 vs 50 requested: target 1.5
        factor = decide_factor(50.0, 20.0, factor, LONG_AGO, NOW, settings).factor
        seen.append(factor)
    # from 1.0: 1.1, 1.2, 1.3, 1.4, 1.5, then stays
    assert seen == pytest.approx([1.1, 1.2, 1.3, 1.4, 1.5, 1.5, 1.5])
    drop = decide_factor(50.0, 45.0, factor, LONG_AGO, NOW, settings)  # 50/45 = 1.111
    assert drop.factor == pytest.approx(1.111, abs=1e-3)
    assert "fell at once" in drop.reason


# --- warm-up and missing peak

@pytest.mark.parametrize("starts, expected", [
    ([ago(300)], ago(300)),                    # 5 min ago, warm-up 10 min
    ([ago(3600), ago(120), ago(400)], ago(120)),  # the most recent start is named
    ([ago(601)], None),                        # past the warm-up
    ([ago(600)], None),                        # exactly 10 min: done
    ([None], NOW),                             # not started yet: warming up
    ([], None),
])
def test_warming_up(starts, expected):
    assert warming_up(starts, NOW, 600) == expected


def test_warm_up_forces_factor_one_and_says_why():
    decision = decide_factor(50 * GIB, 20 * GIB, 1.5, [ago(7200), ago(60)], NOW, FactorSettings(warmup_s=600))
    assert decision.factor == 1.0 and decision.warming_up
    assert "warm-up" in decision.reason and ago(60).isoformat() in decision.reason
    assert "requests are the prediction" in decision.reason


def test_no_peak_means_factor_one_with_the_peaks_reason():
    decision = decide_factor(50 * GIB, None, 1.4, LONG_AGO, NOW, no_peak_reason="too few samples: 2 < 3")
    assert decision.factor == 1.0 and decision.raw is None
    assert decision.reason == "too few samples: 2 < 3; requests are the prediction"


def test_decision_reports_its_figures():
    # 50/20 = 2.5 → clamped 1.5; previous 1.5 → at target
    decision = decide_factor(50 * GIB, 20 * GIB, 1.5, LONG_AGO, NOW)
    assert (decision.raw, decision.target, decision.factor) == (2.5, 1.5, 1.5)
    assert decision.inputs() == {"factor": 1.5, "target": 1.5, "raw_factor": 2.5}
    assert "= 2.500" in decision.reason and "at target" in decision.reason


def test_first_decision_starts_from_the_minimum():
    decision = decide_factor(50.0, 20.0, None, LONG_AGO, NOW, FactorSettings(max_rise_per_update=0.05))
    assert decision.factor == pytest.approx(1.05)
    assert "rising toward 1.500" in decision.reason


@pytest.mark.parametrize("kwargs", [
    {"min_factor": 1.6, "max_factor": 1.5},
    {"min_factor": 0.0},
    {"max_rise_per_update": -0.1},
    {"warmup_s": -1.0},
])
def test_settings_are_validated(kwargs):
    with pytest.raises(ValueError):
        FactorSettings(**kwargs)
