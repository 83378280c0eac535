"""Which nodes are stale: their node agent stopped publishing (pure).

A node is stale at `now` when its last usage sample is older than `after_s`:

    stale(n) ⇔ now − last_sample(n) > after_s

Two exceptions keep a silent *pipeline* from looking like silent *nodes*:

- only nodes heard from can go stale: a node never sampled (its agent not
  started yet, or no scoring in this deployment) is judged by its inventory
  alone;
- when every node heard from would be stale, none is: the silence is then
  the pipeline's (scoring down, the bus away), and taking every node out
  would stop all placement without making any of it safer. A cluster of
  one node therefore never has a stale node.

The times are the samples' own (`sampled_at`, from the agent's clock) and
the `now` the caller passes in, so the rule is the same live, in a replay
and in a simulation.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime


def stale_reason(after_s: float) -> str:
    """The reason a stale node is filtered out with."""
    return f"stale: no metrics for {after_s:g}s"


def too_old(sampled_at: datetime, now: datetime, after_s: float) -> bool:
    """Whether a sample taken at `sampled_at` is more than `after_s` old at `now`."""
    return after_s > 0 and (now - sampled_at).total_seconds() > after_s


def stale_nodes(last_sample: Mapping[str, datetime], now: datetime, after_s: float) -> frozenset[str]:
    """The nodes whose last sample is more than `after_s` old at `now` (see
    the module docstring for when none is)."""
    if after_s <= 0 or not last_sample:
        return frozenset()
    stale = frozenset(node for node, at in last_sample.items() if too_old(at, now, after_s))
    return frozenset() if len(stale) == len(last_sample) else stale
