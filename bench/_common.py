"""What the bus benchmarks share: a synthetic cluster and pod mix, the
simulated node agents' samples, pipelined publishing, and reading each
process's figures (peak RSS from /proc, counters from /metrics, owned
partitions from its log)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import re
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).parent))
import placement_policy  # noqa: E402  (the in-process pod mix beside this file)

from tidal_bus import Bus  # noqa: E402
from tidal_runtime import collect_oldest_only_when_asked  # noqa: E402
from tidal_simulator.topology_builder import make_topology  # noqa: E402
from tidal_schemas import (  # noqa: E402
    GpuAsk, NodeMetrics, NodeTopology, PodLifecycle, Resources, encode, make_envelope,
)
from tidal_schemas.streams import lane_of, stream  # noqa: E402
from tidal_topology import build_metrics  # noqa: E402
from tidal_topology import PodSample  # noqa: E402

MODELS = placement_policy.MODELS


# -- the simulated cluster -----------------------------------------------------
def topologies(n: int, rng: np.random.Generator) -> Iterator[NodeTopology]:
    """`n` nodes of 1, 2, 4 or 8 NUMA nodes (8–32 CPUs each), 0–8 GPUs of
    three models, 80 % offering exclusive CPUs."""
    for i in range(n):
        numa = int(rng.choice([1, 2, 4, 8], p=[0.2, 0.4, 0.3, 0.1]))
        per_numa = int(rng.choice([8, 16, 32])) if numa <= 2 else int(rng.choice([8, 16]))
        gpus = int(rng.choice([0, 1, 2, 4, 8], p=[0.3, 0.1, 0.2, 0.2, 0.2]))
        yield make_topology(f"node-{i:05d}", (per_numa,) * numa, gpus=gpus, model=MODELS[i % 3],
                            memory_mib=8192 * numa * per_numa // 4, exclusive=bool(rng.random() < 0.8))


def pods(count: int, rng: np.random.Generator, namespace: str = "bench") -> list[PodLifecycle]:
    """Pending pods of the openb-like mix (see placement_policy.pod_mix)."""
    now = datetime.now(timezone.utc)
    out = []
    for i, r in enumerate(placement_policy.pod_mix(count, rng)):
        out.append(PodLifecycle(
            namespace=namespace, name=f"p{i:06d}", phase="pending", created_at=now,
            requests=Resources(cpu_milli=r.cpu_milli, memory_mib=r.memory_mib), exclusive_cpus=r.exclusive_cpus,
            cpu_policy=r.cpu_policy if r.exclusive_cpus else None,
            gpu=GpuAsk(count=r.gpu_count, milli=r.gpu_milli, models=list(r.gpu_models)) if r.gpu_count else GpuAsk()))
    return out


def node_sample(topology: NodeTopology, at: datetime, rng: np.random.Generator, *, pods_per_node: int = 4,
                load: tuple[float, float] = (0.05, 0.6)) -> NodeMetrics:
    """One node agent's sample, built by the agent's own code: CPU loads
    drawn from `load` (below remediation's and oversell's thresholds, so
    the stages compute but rarely act) and `pods_per_node` running pods on
    the shared pool."""
    cpus = [c.cpu for c in topology.cpus]
    util = dict(zip(cpus, rng.uniform(*load, size=len(cpus)).round(3).tolist()))
    running = {f"uid-{topology.node}-{j}": PodLifecycle(
        namespace="bench", name=f"{topology.node}-run{j}", phase="running", node=topology.node,
        uid=f"uid-{topology.node}-{j}", created_at=at, requests=Resources(cpu_milli=1000, memory_mib=1024))
        for j in range(pods_per_node)}
    samples = [PodSample(uid=uid, cpu_milli=int(rng.integers(100, 1000)), memory_mib=int(rng.integers(100, 1000)))
               for uid in running]
    total = topology.capacity.memory_mib
    return build_metrics(topology, at=at, interval_s=10.0, cpu_util=util,
                         memory_used_mib=int(total * rng.uniform(0.2, 0.5)), memory_total_mib=total,
                         pod_samples=samples, pods_by_uid=running, cpusets={}, shared_pool=cpus, frozen={})


# -- publishing -----------------------------------------------------------------
def batched(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


PUBLISH_WINDOW = 256  # events published and not yet acked, by every stand-in publisher


async def publish_all(bus: Bus, payloads: Iterable, window: int = PUBLISH_WINDOW) -> list:
    """Publish with up to `window` acks outstanding; the envelopes, in order.
    Events of one key keep their order only across calls, so pass at most
    one event per key (e.g. one sampling round) per call."""
    envelopes: list = []
    for chunk in batched(list(payloads), window):
        envelopes += await asyncio.gather(*(bus.publish(p) for p in chunk))
    return envelopes


def encoded(payload, cluster: str) -> tuple:
    """An event ready for `Backend.publish`: (stream, cluster, key, bytes, id, lane)."""
    envelope = make_envelope(payload, cluster=cluster, source="agents")
    return stream(envelope.type), envelope.cluster, envelope.key, encode(envelope), envelope.id, lane_of(payload)


async def publish_encoded(bus: Bus, items: Sequence[tuple], window: int = PUBLISH_WINDOW) -> None:
    """`publish_all` for events `encoded` beforehand, each in its lane (`StreamSpec.side_lane`)."""
    for chunk in batched(items, window):
        await asyncio.gather(*(bus.backend.publish(*item[:5], lane=item[5]) for item in chunk))


# -- simulated cluster actors, each in its own process ----------------------------
class Actor:
    """A spawned process running one of the jobs below (so the benchmark's
    own publishing does not share a core, or an event loop, with its
    observer). It connects, says it is ready, waits for `go()`, runs, and
    puts its result on a queue; `stop()` ends a job that runs until told."""

    def __init__(self, job, **params) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._ready, self._results, self._go, self._stop = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
        self.process = ctx.Process(target=_actor_main, daemon=True,
                                   args=(job, params, self._ready, self._go, self._stop, self._results))
        self.process.start()

    def wait_ready(self, timeout: float = 300) -> None:
        self._ready.get(timeout=timeout)

    def go(self) -> None:
        self._go.set()

    def stop(self) -> None:
        self._stop.set()

    def result(self, timeout: float = 3600) -> dict:
        found = self._results.get(timeout=timeout)
        self.process.join(30)
        return found


def _actor_main(job, params, ready, go, stop, results) -> None:
    collect_oldest_only_when_asked()  # as the services do: the stand-in's collector takes less of the machine
    asyncio.run(job(ready=ready, go=go, stop=stop, results=results, **params))


async def agents_job(*, url: str, namespace: str, cluster: str, nodes: int, mine: tuple[int, int], seed: int,
                     rounds: int | None = None, interval_s: float = 0.0, live: bool = False, aligned: bool = False,
                     ready, go, stop, results) -> None:
    """The node agents of nodes [mine) of `topologies(nodes, rng(seed))`: a sample
    of every node per round, `rounds` rounds (None: until stopped).

    With `interval_s` 0 the rounds go as fast as the broker acks. Otherwise
    every node samples once every `interval_s`, each at its own phase, as
    agents started at different times do: the samples arrive at an even
    rate, node i of n first at i/n of an interval after `go` (`aligned`: the
    whole round at once, one interval after `go`, the worst case).

    `live` builds every sample with the agent's code, as agents do.
    Otherwise one round is built up front and re-stamped; a fixed number of
    rounds as fast as acks come is even encoded up front, so that publishing
    is all the process does while it is measured."""
    inventory = list(topologies(nodes, np.random.default_rng(seed)))[mine[0]:mine[1]]  # the cluster's own nodes
    rng = np.random.default_rng([seed, *mine])
    base = datetime.now(timezone.utc)
    template = [] if live else [node_sample(t, base, rng) for t in inventory]
    stamped = lambda r: [s.model_copy(update={"sampled_at": base + timedelta(seconds=10 * r)})  # noqa: E731
                         for s in template]
    ready_made = [[encoded(s, cluster) for s in stamped(r)] for r in range(rounds)] \
        if rounds is not None and not interval_s and not live else []

    def samples(indices: Iterable[int], at: datetime) -> list:
        return [node_sample(inventory[i], at, rng) for i in indices] if live \
            else [template[i].model_copy(update={"sampled_at": at}) for i in indices]

    async with Bus.from_url(url, namespace=namespace, cluster=cluster, source="agents") as bus:
        ready.put(len(inventory))
        await asyncio.to_thread(go.wait)
        start, cpu = time.time(), time.process_time()
        if interval_s and not aligned:
            sent = await _agents_at_their_phases(bus, len(inventory), samples, interval_s, rounds, start, stop)
            r = sent / max(len(inventory), 1)
        else:
            sent, r = 0, 0
            while (rounds is None or r < rounds) and not stop.is_set():
                if interval_s and await asyncio.to_thread(stop.wait,
                                                          max(start + (r + 1) * interval_s - time.time(), 0)):
                    break
                # one sample per node per call: each node's samples stay in order
                if ready_made:
                    await publish_encoded(bus, ready_made[r])
                    sent += len(ready_made[r])
                else:
                    at = base + timedelta(seconds=10 * r) if not interval_s else datetime.now(timezone.utc)
                    sent += len(await publish_all(bus, samples(range(len(inventory)), at)))
                r += 1
        results.put({"start": start, "end": time.time(), "events": sent, "rounds": round(r, 2),
                     "cpu_s": round(time.process_time() - cpu, 1)})


_AGENT_TICK_S = 0.005  # 2–3 samples a tick at 500 a second: near one at a time, as from agents of their own


async def _agents_at_their_phases(bus: Bus, n: int, samples, interval_s: float, rounds: int | None, start: float,
                                  stop) -> int:
    """Every tick, the samples of the nodes whose time has come (node i at
    start + (i/n + k)·interval); how many were published."""
    sent = 0
    total = None if rounds is None else rounds * n
    while (total is None or sent < total) and not stop.is_set():
        due = int((time.time() - start) / interval_s * n) + 1  # samples due so far, node 0 at `start`
        if total is not None:
            due = min(due, total)
        if due > sent:  # a tick is far under an interval: at most one sample per node per call
            sent += len(await publish_all(bus, samples([k % n for k in range(sent, due)],
                                                       datetime.now(timezone.utc))))
        await asyncio.sleep(_AGENT_TICK_S)  # the stop flag is read each tick: no thread hop a tick
    return sent


async def pods_job(*, url: str, namespace: str, cluster: str, count: int, seed: int, ready, go, stop,
                   results) -> None:
    """Publish `pods(count, seed)` as fast as the broker acks them; the
    result has each pod's event time."""
    burst = pods(count, np.random.default_rng(seed))
    async with Bus.from_url(url, namespace=namespace, cluster=cluster, source="cluster") as bus:
        ready.put(len(burst))
        await asyncio.to_thread(go.wait)
        start = time.time()
        sent = await publish_all(bus, burst)
        results.put({"start": start, "end": time.time(),
                     "times": {e.payload.event_key(): e.time.timestamp() for e in sent}})


# -- reading a process's figures ---------------------------------------------------
def proc_status_mib(pid: int | None, field: str = "VmHWM") -> float | None:
    """A memory figure of a live process from /proc/<pid>/status, in MiB
    (VmHWM: peak resident set; VmRSS: now). None once it has gone."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time a live process has used (/proc/<pid>/stat)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)


def process_row(name: str, pid: int | None, cpu_before: float | None, pods: int) -> dict:
    """Peak and current RSS and CPU time of one process; its CPU time during
    the run (from `cpu_before`) per pod of the run."""
    cpu = cpu_seconds(pid)
    spent = cpu - cpu_before if cpu is not None and cpu_before is not None else None
    return {"process": name, "pid": pid, "peak_rss_mib": proc_status_mib(pid),
            "rss_now_mib": proc_status_mib(pid, "VmRSS"), "cpu_s": cpu,
            "cpu_ms_per_pod": round(1000 * spent / pods, 2) if spent is not None else None}


def scrape(url: str, timeout: float = 5.0) -> dict[tuple[str, frozenset], float]:
    """Every sample of a /metrics page: (name, labels) -> value."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=timeout) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def handled_by_partition(url: str, stream: str) -> Counter:
    """partition -> events of `stream` the process at `url` has handled
    (tidal_partition_events_handled_total)."""
    found: Counter = Counter()
    for (name, labels), value in scrape(url).items():
        labels = dict(labels)
        if name == "tidal_partition_events_handled_total" and labels.get("stream") == stream:
            found[int(labels["partition"])] += int(value)
    return found


_OWNS = re.compile(r"on (\S+): owns partitions \[([0-9, ]*)\]")


def owned_partitions(log_path: Path, stream: str) -> frozenset[int] | None:
    """The partitions of `stream` a service owned at its last rebalance,
    from its JSON log (None before its first assignment)."""
    owned = None
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if "owns partitions" not in line:
            continue
        try:
            match = _OWNS.search(json.loads(line).get("msg", ""))
        except ValueError:
            continue
        if match and match.group(1).endswith(stream):
            owned = frozenset(int(p) for p in match.group(2).replace(" ", "").split(",") if p)
    return owned


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(seconds) * 1000, q)), 1) if len(seconds) else float("nan")


def table(rows: list[dict], columns: list[str]) -> str:
    """Rows as an aligned text table."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
