"""Tidal simulator: a stand-in cluster — its Kubernetes API server, kubelets
that behave as the kubelet (admission by the node object's allocatable,
devices from the node agents' device plugins over gRPC) and the machines
the node agents' own code runs on — for the real bridge and services.

The model is pure and lives in its own modules (`model`, `sampling`,
`usage_curves`, `synthetic`, `scenario`, `trace`); `service` is the thin bus
wiring and `driver` releases pods to the pipeline and waits for it.
"""

import os

# The process hosting the simulator serves gRPC (every GPU node's device
# plugin and kubelet) and may fork the stack's services (`tidal simulate`
# starts the bridge, and restarts services, with a preexec_fn). gRPC's fork
# handlers crash such a child about one fork in six while its threads are
# busy; the child execs at once and never uses gRPC, so they are not wanted.
# Read when grpc is first imported: this only helps where the package comes
# first (`tidal_topology.settings` imports grpc too); a process that forks
# should set it at its entry. `run.simulate` also starts the machines' gRPC
# only once the bridge's process is started.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
