"""Stop-scheduling taint with hysteresis, evict threshold from the memory limit."""

from __future__ import annotations

import pytest

from tidal_oversell.settings import OversellSettings
from tidal_oversell.thresholds import evict_threshold, taint_decision, utilisation

# stop 0.75, hysteresis 0.125 → released below 0.625 (all exact in binary)
STOP, HYST = 0.75, 0.125


@pytest.mark.parametrize("util, tainted, action", [
    (0.70, False, "keep"),     # below stop
    (0.75, False, "taint"),    # at stop: ≥ taints
    (0.99, False, "taint"),
    (0.70, True, "keep"),      # inside the hysteresis band: stays tainted
    (0.625, True, "keep"),     # at the release point: not below it
    (0.624, True, "untaint"),
    (0.10, True, "untaint"),
    (0.90, True, "keep"),      # still high
    (0.70, False, "keep"),     # the band does not taint an untainted node
])
def test_taint_decision_with_hysteresis(util, tainted, action):
    decision = taint_decision(util, tainted, STOP, HYST)
    assert decision.action == action
    assert f"{util:.3f}" in decision.reason


def test_taint_untaint_cycle_does_not_flap():
    tainted, actions = False, []
    for util in (0.74, 0.76, 0.74, 0.76, 0.70, 0.62, 0.74, 0.76):
        decision = taint_decision(util, tainted, STOP, HYST)
        actions.append(decision.action)
        tainted = {"taint": True, "untaint": False}.get(decision.action, tainted)
    assert actions == ["keep", "taint", "keep", "keep", "keep", "untaint", "keep", "taint"]


@pytest.mark.parametrize("limit, basis, fraction, mib, util", [
    # not oversold: basis = limit → 0.95 · 131072 = 124518.4 MiB = 0.95
    (131072, 131072, 0.95, 124518.4, 0.95),
    # oversold ×1.5: basis 196608 → 124518.4 / 196608 = 0.6333
    (131072, 196608, 0.95, 124518.4, 0.6333),
    # evict at the limit itself
    (65536, 65536, 1.0, 65536, 1.0),
])
def test_evict_threshold_comes_from_the_memory_limit(limit, basis, fraction, mib, util):
    threshold = evict_threshold(limit, basis, fraction)
    assert threshold.mib == pytest.approx(mib)
    assert threshold.utilisation == pytest.approx(util, abs=1e-4)
    assert f"{limit:g} MiB" in threshold.reason


def test_utilisation_of_an_oversold_basis():
    assert utilisation(98304, 196608) == 0.5
    with pytest.raises(ValueError):
        utilisation(1, 0)


@pytest.mark.parametrize("kwargs", [
    {"stop_threshold": 0.0}, {"stop_threshold": 1.2}, {"hysteresis": -0.1},
    {"stop_threshold": 0.5, "hysteresis": 0.5}, {"evict_fraction": 0.0},
])
def test_settings_are_validated(kwargs):
    with pytest.raises(ValueError):
        OversellSettings(**kwargs)


def test_evict_threshold_rejects_nonsense():
    with pytest.raises(ValueError):
        evict_threshold(0, 1024)
