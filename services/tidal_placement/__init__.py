"""Tidal placement: the scheduler cache, NUMA/CPU and GPU placement policy.

Policy modules here are pure (no I/O, no clock, no hidden randomness); the
asyncio service wiring lives beside them and only decodes events, calls
policy and publishes results.
"""
