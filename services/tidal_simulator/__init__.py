"""Tidal simulator: a stand-in cluster — its Kubernetes API server, kubelets
that behave as the kubelet (admission by the node object's allocatable,
devices from the node agents' device plugins over gRPC) and the machines
the node agents' own code runs on — for the real bridge and services.

The model is pure and lives in its own modules (`model`, `sampling`,
`usage_curves`, `synthetic`, `scenario`, `trace`); `service` is the thin bus
wiring and `driver` releases pods to the pipeline and waits for it.
"""
