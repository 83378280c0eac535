"""The workload a standalone simulator runs, from its settings: a scenario
file, else an openb trace, else the synthetic generator."""

from __future__ import annotations

import numpy as np

from .scenario import load_scenario, scenario_workload
from .settings import SimulatorSettings
from .synthetic import generate, parse_spec
from .trace import trace_workload
from .workload import Workload


def workload_from_settings(settings: SimulatorSettings) -> Workload:
    """See the module docstring."""
    if settings.scenario:
        return load_scenario(settings.scenario)
    if settings.nodes_csv and settings.pods_csv:
        workload, _ = trace_workload(settings.nodes_csv, settings.pods_csv, seed=settings.seed, arrive_only=False)
        return workload
    spec = parse_spec(settings.synthetic) if settings.synthetic else parse_spec(f"seed={settings.seed}")
    return synthetic_workload(spec)


def synthetic_workload(spec) -> Workload:
    """The generator's scenario for `spec`, seeded by `spec.seed`, expanded."""
    scenario = generate(spec, np.random.default_rng(spec.seed))
    workload = scenario_workload(scenario, "synthetic")
    workload.source.update({"kind": "synthetic", "spec": spec.model_dump(mode="json")})
    return workload
