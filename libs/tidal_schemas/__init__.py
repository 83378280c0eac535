"""Tidal's shared event schemas: one versioned pydantic model per event."""

from .actions import STOP_SCHEDULING_TAINT, ActionResult, CpuAssignment, DeadLetter, NodeAction
from .common import Resources, pod_key
from .envelope import (
    Envelope,
    Payload,
    decode,
    decode_obj,
    derived_id,
    encode,
    event_types,
    make_envelope,
    payload_model,
)
from .errors import SchemaError
from .node import (Cpu, Gpu, NodeAllocatable, NodeAllocatables, NodeMetrics, NodeStatus, NodeTopology, NumaNode,
                   PodUsage)
from .journal import StageJournal
from .placement import BindResult, GpuShare, NodeCandidate, PlacementDecision, PlacementDecisions
from .pod import HOLDING_PHASES, GpuAsk, GpuBinding, GpuGroup, PodLifecycle, TenantConfig, requested
from .resource_type import CPU_TYPE, GPU_TYPE, resource_type
from .scores import NodeScore, NodeScores, PeakEstimate, UserScore
from .tenancy import TenantUsage

__all__ = [
    "CPU_TYPE", "GPU_TYPE",
    "STOP_SCHEDULING_TAINT", "ActionResult", "BindResult", "Cpu", "CpuAssignment", "DeadLetter", "Envelope", "Gpu",
    "HOLDING_PHASES", "GpuAsk", "GpuBinding", "GpuGroup", "GpuShare", "NodeAction", "NodeAllocatable",
    "NodeAllocatables", "NodeCandidate", "NodeMetrics", "NodeScore", "NodeScores", "NodeStatus", "NodeTopology",
    "NumaNode",
    "Payload", "PeakEstimate", "PlacementDecision", "PlacementDecisions", "StageJournal", "PodLifecycle", "PodUsage", "Resources",
    "SchemaError", "TenantConfig", "TenantUsage", "UserScore", "decode", "decode_obj", "derived_id",
    "encode", "event_types", "make_envelope", "payload_model", "pod_key", "requested", "resource_type",
]
