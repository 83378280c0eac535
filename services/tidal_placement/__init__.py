"""Tidal placement: the scheduler cache, NUMA/CPU and GPU placement policy.

Policy modules here are pure (no I/O, no clock, no hidden randomness); the
asyncio service wiring lives beside them and only decodes events, calls
policy and publishes results.
"""

from tidal_runtime.exports import lazy_exports

# The public entry points (tools on top import these, never the modules).
PUBLIC = {
    "ClusterState": "cluster_state:ClusterState",
    "ClusterCache": "cache:ClusterCache",
    "decide_placement": "decide:decide",  # not `decide`: the module of that name would shadow it
    "PodRequest": "pod_request:PodRequest",
    "GPU_STRATEGIES": "gpu_strategies:GPU_STRATEGIES",
    "ROW_LOCAL": "gpu_strategies:ROW_LOCAL",
    "make_strategy": "gpu_strategies:make_strategy",
    "GpuStrategy": "gpu_candidates:GpuStrategy",
    "JointStrategy": "gpu_joint:JointStrategy",
    "per_pod_strategy": "gpu_joint:per_pod",
    "take_window": "gpu_joint:take_window",
    "typical_workload": "gpu_workload:typical_workload",
    "Shape": "gpu_workload:Shape",
    "FragModel": "gpu_frag:FragModel",
    "refresh_due": "learning:refresh_due",
    "StrategyLearner": "learning:StrategyLearner",
    "tenant_usage": "tenancy:tenant_usage",
    "PlacementService": "service:PlacementService",
    "PlacementSettings": "settings:PlacementSettings",
    "scheduling_cycle": "cycle:cycle",
    "gather_journals": "replay:gather",
    "replay_journal": "replay:replay_member",
    "first_difference": "replay:first_difference",
    "recorded_outputs": "replay:recorded_outputs",
    "ReplayAnswers": "replay_answers:Answers",  # not `cycle`: the module of that name would shadow it
}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
