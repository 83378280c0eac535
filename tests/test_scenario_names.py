"""Scenario files name each node and pod once; repeats are named in the error."""

from __future__ import annotations

import pytest

from tidal_simulator.scenario import ScenarioError, parse_scenario, scenario_workload


def test_repeated_names_in_a_scenario_are_named_once_each():
    document = {"name": "twice", "nodes": [{"name": "n", "numa_cpus": [2]}, {"name": "n", "numa_cpus": [2]}],
                "pods": [{"name": "p", "cpu_milli": 100}]}
    with pytest.raises(ScenarioError, match="node names repeat: n$"):
        scenario_workload(parse_scenario(document))
    document = {"name": "twice", "nodes": [{"name": "n", "numa_cpus": [2]}],
                "pods": [{"name": "p", "cpu_milli": 100}, {"name": "p", "cpu_milli": 100}]}
    with pytest.raises(ScenarioError, match="pod names repeat: .*p$"):
        scenario_workload(parse_scenario(document))
