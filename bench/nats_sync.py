"""What `sync_interval: always` costs: the same publishes, acked, to two
embedded nats-servers side by side, one fsyncing every write before its ack
(what Tidal configures) and one with the server's default (a flush every
2 minutes), taken in turns so the noisy machine weighs on both alike.

Each round publishes `--events` events of `--bytes` bytes through the
backend's `send` with a window of `--window` unacked events (as the
services' output window does) and reports events/s per server and the ratio.

Run: .venv/bin/python bench/nats_sync.py [--events 20000] [--bytes 600] [--window 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from tidal_bus import Bus
from tidal_bus.embedded import EmbeddedNats
from tidal_schemas.streams import stream


async def publish_round(url: str, namespace: str, events: int, size: int, window: int) -> float:
    spec = stream("node.metrics")
    async with Bus.from_url(url, namespace=namespace, cluster="bench", source="bench") as bus:
        await bus.backend.ensure_stream(spec)
        payload = b"x" * size
        pending: list = []
        started = time.perf_counter()
        for i in range(events):
            pending.append(await bus.backend.send(spec, "bench", f"node-{i % 1000}", payload, f"{namespace}-{i}"))
            if len(pending) >= window:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
        return events / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--bytes", type=int, default=600)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        servers = {name: EmbeddedNats(Path(tmp) / name, sync_interval=interval).start()
                   for name, interval in (("always", "always"), ("default", None))}
        try:
            rates: dict[str, list[float]] = {interval: [] for interval in servers}
            for r in range(args.rounds):
                for interval, server in servers.items():
                    rates[interval].append(asyncio.run(publish_round(server.url, f"r{r}", args.events, args.bytes,
                                                                     args.window)))
        finally:
            for server in servers.values():
                server.stop()
    best = {interval: max(values) for interval, values in rates.items()}
    print(json.dumps({"events": args.events, "bytes": args.bytes, "window": args.window,
                      "events_per_s": {k: [round(v) for v in vs] for k, vs in rates.items()},
                      "always_over_default": round(best["always"] / best["default"], 2)}))


if __name__ == "__main__":
    main()
