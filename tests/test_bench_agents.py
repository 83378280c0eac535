"""The benchmarks' node agents sample as agents started at different times
do: every node once an interval, each at its own phase, so the samples come
as an even stream; `aligned` sends a whole round at one instant (the worst
case). Checked on a real nats-server by when each sample was taken."""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
from pathlib import Path

from conftest import make_bus
from tidal_bus import StartAt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from _common import agents_job  # noqa: E402

NODES, INTERVAL_S = 20, 1.0


async def sampled(url: str, namespace: str, aligned: bool) -> dict[str, list[float]]:
    """Two rounds of every node's samples: node -> when each was taken,
    in seconds after the first."""
    go, stop, ready, results = threading.Event(), threading.Event(), queue.Queue(), queue.Queue()
    go.set()
    await agents_job(url=url, namespace=namespace, cluster="c1", nodes=NODES, mine=(0, NODES), seed=0, rounds=2,
                     interval_s=INTERVAL_S, aligned=aligned, ready=ready, go=go, stop=stop, results=results)
    assert results.get_nowait()["events"] == 2 * NODES
    times: dict[str, list[float]] = {}
    async with make_bus(url, namespace) as bus:
        async for _, event in bus.read("node.metrics", StartAt.earliest()):
            times.setdefault(event.payload.node, []).append(event.payload.sampled_at.timestamp())
    first = min(t for ts in times.values() for t in ts)
    return {node: [t - first for t in ts] for node, ts in times.items()}


def test_each_node_samples_once_an_interval_at_its_own_phase(nats_server, namespace):
    times = asyncio.run(sampled(nats_server.url, namespace, aligned=False))
    assert len(times) == NODES and all(len(ts) == 2 for ts in times.values())
    for ts in times.values():  # a node's samples one interval apart
        assert abs((ts[1] - ts[0]) - INTERVAL_S) < 0.4 * INTERVAL_S
    firsts = sorted(ts[0] for ts in times.values())
    assert firsts[-1] - firsts[0] > 0.6 * INTERVAL_S  # the first round spread over the interval
    # an even stream: no tenth of the interval holds more than a few of the round
    per_tenth = [sum(1 for t in firsts if k / 10 <= t / INTERVAL_S < (k + 1) / 10) for k in range(10)]
    assert max(per_tenth) <= NODES // 4, per_tenth


def test_aligned_agents_send_a_whole_round_at_once(nats_server, namespace):
    times = asyncio.run(sampled(nats_server.url, namespace, aligned=True))
    assert len(times) == NODES and all(len(ts) == 2 for ts in times.values())
    for round_ in (0, 1):
        at = [ts[round_] for ts in times.values()]
        assert max(at) - min(at) < 0.3 * INTERVAL_S
