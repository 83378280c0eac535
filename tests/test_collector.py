"""A service process's garbage collector (tidal_runtime.collector): the
oldest generation is collected only when the service's loop asks, and then
a cycle that reached it is freed. The settings are process-wide, so each
case runs in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from conftest import patience

GROW_AND_COUNT = """
import asyncio, gc, json, weakref
from tidal_runtime.collector import collect_oldest_only_when_asked, collect_periodically

class Node:
    pass

def full_collections():
    return gc.get_stats()[2]["collections"]

if TUNED:
    collect_oldest_only_when_asked()
gc.collect()
before = full_collections()
held = [[{"i": i}] for i in range(600_000)]  # a service's state growing: long-lived containers
grown = full_collections() - before

cycle = Node()
cycle.me = cycle
gone = weakref.ref(cycle)
gc.collect(1)  # it survives a middle collection: it is in the oldest generation now
del cycle
for _ in range(5):
    gc.collect(1)
kept_by_young = gone() is not None

async def main():
    task = asyncio.create_task(collect_periodically(0.05))
    await asyncio.sleep(0.3)
    task.cancel()
asyncio.run(main())
print(json.dumps({"full_while_growing": grown, "cycle_left_by_young": kept_by_young,
                  "cycle_freed_by_loop": gone() is None}))
"""


def run(tuned: bool) -> dict:
    script = f"TUNED = {tuned}\n" + textwrap.dedent(GROW_AND_COUNT)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=patience(120), check=True)
    return json.loads(done.stdout)


def test_a_growing_state_triggers_no_full_collection_and_the_loop_frees_old_cycles():
    tuned = run(True)
    assert tuned["full_while_growing"] == 0
    assert tuned["cycle_left_by_young"]  # only a full collection finds it
    assert tuned["cycle_freed_by_loop"]


def test_python_left_alone_collects_in_full_as_the_state_grows():
    """The control: the growth above is what makes Python's own schedule
    walk everything, again and again."""
    assert run(False)["full_while_growing"] > 0
