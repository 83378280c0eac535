"""One registry per extension point: the names a user can give (settings,
schema Literals, pod annotations, scenario files) are exactly the names the
registry implements. A name added in one place and not the others fails here."""

from __future__ import annotations

from typing import Literal, get_args, get_origin

import pytest

from tidal_bridge.annotations import ANNOTATION_KEYS, CPU_POLICY
from tidal_oversell.policies import OVERSELL_POLICIES
from tidal_oversell.settings import OversellSettings
from tidal_placement.cpu_distribution import CPU_POLICIES
from tidal_placement.gpu_strategies import GPU_STRATEGIES
from tidal_placement.settings import PlacementSettings
from tidal_schemas import NodeAllocatable, PodLifecycle
from tidal_schemas.scores import PeakEstimate
from tidal_scoring.peak import ESTIMATORS
from tidal_scoring.settings import ScoringSettings
from tidal_simulator.scenario import PodSpec


def _choices(model, field: str) -> set[str]:
    """The names a pydantic field accepts (a Literal, optionally | None)."""
    def names(annotation) -> set[str]:
        if get_origin(annotation) is Literal:
            return set(get_args(annotation))
        return set().union(*(names(arg) for arg in get_args(annotation)))
    return names(model.model_fields[field].annotation)


def test_cpu_policies():
    assert set(CPU_POLICIES) == _choices(PodLifecycle, "cpu_policy") == _choices(PodSpec, "cpu_policy")
    parse = ANNOTATION_KEYS[CPU_POLICY][1]
    for name in CPU_POLICIES:
        assert parse(name) == name
    with pytest.raises(ValueError, match="spread"):
        parse("packed")


def test_peak_estimators():
    assert set(ESTIMATORS) == _choices(PeakEstimate, "estimator") == _choices(ScoringSettings, "peak_estimator")


def test_oversell_policies():
    assert set(OVERSELL_POLICIES) == _choices(NodeAllocatable, "policy") == _choices(OversellSettings, "default_policy")


def test_gpu_strategies():
    for name in GPU_STRATEGIES:
        assert PlacementSettings(gpu_strategy=name).gpu_strategy == name
    with pytest.raises(ValueError, match="unknown GPU strategy"):
        PlacementSettings(gpu_strategy="worst-fit")
