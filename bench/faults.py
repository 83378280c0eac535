"""Fault recovery times with the deployed failure-detection settings.

The fault tests (tests/test_faults_kill.py, tests/test_faults_broker.py)
assert what happens and run with a crash noticed in 2–3 s; this prints how
long recovery takes with the settings a deployment has (by default: a dead
NATS group member's partitions move after TIDAL_BUS_MEMBER_TTL_S = 6 s, what
it had in hand is handed out again after TIDAL_BUS_ACK_WAIT_S = 30 s).

For each of placement, scoring, oversell and remediation: the service is
killed -9 with work in hand in the middle of the fault scenario
(tests/fixtures/faults/scenario.yaml) and restarted at once; the figure is
the time from the kill until it is back and has handled its backlog (for
placement: until the pod it was deciding on is decided). Then nats-server
is stopped for 10 s mid-run: the time from its start until every service is
ready again. Every run is checked as in the tests (nothing lost, nothing
twice, the same end as an uninterrupted run).

Prints one JSON line per fault:
{"fault": "kill -9 scoring", "ack_wait_s": 30, "member_ttl_s": 6, "recovered_s": X, "in_hand": N}

Run: .venv/bin/python bench/faults.py [--ack-wait 30] [--member-ttl 6] [--only scoring]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_faults_kill as faults  # noqa: E402  (the tests' stack, scenario and checks)
from tidal_bus.embedded import EmbeddedNats  # noqa: E402


def nats_outage(server: EmbeddedNats, seconds: float, timings: dict):
    def hook(sim, stack, bus, run) -> None:
        tick = sim.tick

        async def tick_then_outage() -> float:
            t = await tick()
            if t >= 60 and not timings:
                server.stop()
                run.killed_at = f"t={t:.0f} s"
                await asyncio.sleep(seconds)
                started = time.monotonic()
                server.start()

                async def all_ready() -> bool:
                    states = await asyncio.gather(*(asyncio.to_thread(s.ready) for s in stack.services))
                    return all(states)

                await faults.wait_until_async(all_ready, 120, "every service ready")
                timings["ready_s"] = time.monotonic() - started
            return t

        sim.tick = tick_then_outage

    return hook


async def main(args: argparse.Namespace) -> None:
    # the deployed settings, not the tests' quick ones (placement's leader hand-over included)
    for key in ("TIDAL_PLACEMENT_TAKEOVER_SETTLE_S", "TIDAL_PLACEMENT_PERMIT_TIMEOUT_S"):
        faults.ENV.pop(key, None)
    faults.ENV.update({"TIDAL_BUS_ACK_WAIT_S": str(args.ack_wait), "TIDAL_BUS_MEMBER_TTL_S": str(args.member_ttl)})
    faults.RECOVERY_TIMEOUT_S = max(120.0, 3 * args.ack_wait)
    settings = {"ack_wait_s": args.ack_wait, "member_ttl_s": args.member_ttl}
    with tempfile.TemporaryDirectory(prefix="tidal-faults-") as tmp:
        server = EmbeddedNats(Path(tmp) / "nats").start()
        try:
            baseline = await faults.simulate_on_stack(server.url, Path(tmp) / "baseline")
            faults.check_invariants(baseline)
            for name in args.only or list(faults.KILLS):
                run = await faults.simulate_on_stack(server.url, Path(tmp) / name, faults.kill_hook(faults.KILLS[name]))
                faults.check_invariants(run)
                faults.assert_same_end(run, baseline)
                print(json.dumps({"fault": f"kill -9 {name}", **settings, "recovered_s": round(run.recovered_s, 1),
                                  "in_hand": run.in_hand}), flush=True)
            if not args.only:
                timings: dict = {}
                run = await faults.simulate_on_stack(server.url, Path(tmp) / "outage",
                                                     nats_outage(server, args.outage, timings))
                faults.check_invariants(run)
                faults.assert_same_end(run, baseline)
                print(json.dumps({"fault": f"nats-server down {args.outage:g} s", **settings,
                                  "recovered_s": round(timings["ready_s"], 1)}), flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ack-wait", type=float, default=30.0, help="TIDAL_BUS_ACK_WAIT_S of the services")
    parser.add_argument("--member-ttl", type=float, default=6.0, help="TIDAL_BUS_MEMBER_TTL_S of the services")
    parser.add_argument("--outage", type=float, default=10.0, help="seconds nats-server stays down")
    parser.add_argument("--only", nargs="*", choices=list(faults.KILLS), help="kill only these services")
    asyncio.run(main(parser.parse_args()))
