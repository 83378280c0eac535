"""A lingering Kafka group member (`linger_s`) reads a backlog at full
speed: a fetch that brings only part of what the broker holds (here each
fetch capped by `max_partition_fetch_bytes`) is not held for the linger,
as the broker's high watermark says more is there. (A backlog's last,
short batch may wait one linger: nothing says more is coming.)"""

from __future__ import annotations

import asyncio

from builders import metrics
from conftest import KAFKA_TEST_OPTIONS, patience, wait_until
from tidal_bus import Bus


async def test_a_backlog_fetched_in_small_parts_is_not_held_for_the_linger(kafka_server, namespace):
    small_fetches = {"group_options": {**KAFKA_TEST_OPTIONS["group_options"], "max_partition_fetch_bytes": 2048}}
    seen: list[float] = []

    async def handler(envelope, delivery) -> None:
        seen.append(envelope.payload.node_cpu_util)

    async with Bus.from_url(kafka_server.url, namespace=namespace, cluster="c1", source="test",
                            **small_fetches) as bus:
        # One key, one partition: a backlog of many small fetches. More than one fetch's records
        # (256) as well: the broker may answer the first fetch past its byte limit (Tansu sometimes
        # sends the whole backlog), and the backlog must not then be a short batch that may linger.
        for i in range(600):
            await bus.publish(metrics("node-a", load=i / 1000))
        consumer = bus.consumer("node.metrics", "g", handler, linger_s=30.0)
        task = asyncio.create_task(consumer.run())
        try:
            await asyncio.wait_for(consumer.ready.wait(), patience(30))
            # the first fetch holds a few of the 600: handed over at once, not after the 30 s linger
            await wait_until(lambda: len(seen) > 0, timeout=20, what="a partial fetch of the backlog, not held")
        finally:
            task.cancel()  # abrupt: a graceful stop would wait out a short last batch's linger
            await asyncio.gather(task, return_exceptions=True)
    assert seen == [i / 1000 for i in range(len(seen))]
