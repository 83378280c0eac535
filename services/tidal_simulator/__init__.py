"""Tidal simulator: a stand-in cluster that publishes what the bridge and the
node agents would (topologies, usage, pod lifecycle, bind and action
results) and acts on what they would consume (decisions, allocatable,
actions).

The model is pure and lives in its own modules (`model`, `sampling`,
`usage_curves`, `synthetic`, `scenario`, `trace`); `service` is the thin bus
wiring and `driver` releases pods to the pipeline and waits for it.
"""
