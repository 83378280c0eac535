"""Tidal scoring: fair-share user scores (SPEC §C), NUMA/node load (§E) and
node peak estimates (§D). This package holds the pure policy; the service
wiring decodes events, calls these functions and publishes the results."""
