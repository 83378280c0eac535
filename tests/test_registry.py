"""One registry per extension point: the names a user can give (settings,
schema Literals, pod annotations, scenario files) are exactly the names the
registry implements. A name added in one place and not the others fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest

from tidal_bridge.annotations import ANNOTATION_KEYS, CPU_POLICY
from tidal_oversell.policies import OVERSELL_POLICIES
from tidal_oversell.settings import OversellSettings
from tidal_policy.cpu_distribution import CPU_POLICIES
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


def test_bus_backends():
    from tidal_bus import BUS_BACKENDS, BusConfigError, backend_from_url, options_for
    from tidal_runtime.settings import ServiceSettings

    security = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
    for scheme in BUS_BACKENDS:
        assert f"`{scheme}://" in security, f"docs/security.md does not show a {scheme}:// bus URL"
    with pytest.raises(BusConfigError, match="nats://, tls://, kafka://"):
        backend_from_url("amqp://h:5672", "tidal")
    # the options a backend takes come from its constructor, so NATS's failure
    # detection never reaches Kafka, and a CLI's connect deadline never reaches it either
    asked = {"ack_wait_s": 1.0, "member_ttl_s": 2.0, "connect_deadline_s": 3.0, "fetch_batch": 5,
             "group_options": {}}
    assert set(options_for("nats://h:4222", **asked)) == {"ack_wait_s", "member_ttl_s", "connect_deadline_s",
                                                          "fetch_batch"}
    assert set(options_for("kafka://h:9092", **asked)) == {"fetch_batch", "group_options"}
    assert ServiceSettings(bus_url="kafka://h:9092").bus_options() == {"replication_factor": None}  # None: by brokers
    assert set(ServiceSettings(bus_url="tls://h:4222").bus_options()) == {"ack_wait_s", "member_ttl_s", "replicas"}


def test_node_filters():
    from tidal_bridge.unschedulable import PHRASES
    from tidal_placement.cache import STOP_SCHEDULING
    from tidal_placement.decide import HOST_FILTERS, LATER_FILTERS
    from tidal_placement.sched_metrics import REASONS, STAGES
    from tidal_schemas.filters import NODE_FILTERS, NOT_PERMITTED

    # every name placement counts nodes out by has its metric category and its words on the pod
    emitted = {NOT_PERMITTED, *HOST_FILTERS, *LATER_FILTERS, STOP_SCHEDULING}
    assert emitted == set(NODE_FILTERS) == set(PHRASES) == set(STAGES)
    assert set(STAGES.values()) <= set(REASONS)
