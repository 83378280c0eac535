"""Tidal oversell: oversell factor (SPEC §D, seed 003), bounded allocatable
(seed 004), stop-scheduling taints and eviction choice. This package holds
the pure policy; the service wiring decodes events, calls these functions and
publishes `node.allocatable` and `node.action`."""
