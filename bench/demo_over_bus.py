"""The demo scenario over an external bus, as a platform engineer runs it:
services started by `tidal up --bus`, then `tidal simulate --scenario
examples/demo/scenario.yaml --bus …`, then `tidal audit` with the services
still up. Several runs, one line each, and exit 1 if any run had a violation.

- `--bus nats-cluster`: three loopback nats-servers (JetStream, R3 streams,
  `sync_interval: always`); during each run one server at a time is killed
  -9 and started again `--down` seconds later: a plain server, the decision
  log's leader, then the server most clients are connected to. The line says
  how long after each kill every service's /readyz answered 200 again; a run
  where that took over 10 s fails.
- `--bus kafka`: one embedded Kafka-protocol broker (Tansu; no multi-broker
  one installs here), no kills.

Run: .venv/bin/python bench/demo_over_bus.py --bus nats-cluster|kafka [--runs 5] [--down 12]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nats

from tidal_bus.embedded import EmbeddedKafka, EmbeddedNatsCluster

ROOT = Path(__file__).resolve().parents[1]
TIDAL = [sys.executable, "-m", "tidal_cli.main"]
SCENARIO = ROOT / "examples" / "demo" / "scenario.yaml"
ACTIONS = ROOT / "examples" / "demo" / "actions.yaml"  # the scenario expects actions carried out
NAMESPACE, CLUSTER = "kt", "sim"
READY_WITHIN_S = 10.0  # issue 52: every service ready again within 10 s of a kill


def start_stack(url: str, data: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    log = data / "up.log"
    up = subprocess.Popen(TIDAL + ["up", "--bus", url, "--namespace", NAMESPACE, "--cluster", CLUSTER,
                                   "--data-dir", str(data / "up"), "--config", str(ACTIONS)],
                          stdout=log.open("w"), stderr=subprocess.STDOUT)
    while "ready;" not in log.read_text():
        if up.poll() is not None:
            sys.exit(f"tidal up exited with {up.returncode}: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    status = json.loads((data / "up" / "status.json").read_text())
    return up, {name: p["url"] for name, p in status["processes"].items() if name != "nats"}


def not_ready(urls: dict[str, str]) -> list[str]:
    bad = []
    for name, url in urls.items():
        try:
            urllib.request.urlopen(url + "/readyz", timeout=1).read()
        except OSError:
            bad.append(name)
    return bad


def decision_log_leader(url: str) -> str:
    async def ask() -> str:
        nc = await nats.connect(servers=url.removeprefix("nats://").split(","), connect_timeout=2)
        try:
            info = await asyncio.wait_for(nc.jetstream().stream_info(f"{NAMESPACE.upper()}_PLACEMENT_DECISION"), 30)
            return info.cluster.leader
        finally:
            await nc.close()
    return asyncio.run(ask())


def kill_each(cluster: EmbeddedNatsCluster, urls: dict[str, str], simulate: subprocess.Popen,
              down_s: float) -> list[str]:
    """Kill -9 a plain server, the decision log's leader, the connected one; when each was ready again."""
    seen = []
    for kind in ("plain", "leader", "connected"):
        time.sleep(5.0 if not seen else 3.0)
        if simulate.poll() is not None:
            seen.append(f"{kind}: run over before the kill")
            continue
        leader, busiest = decision_log_leader(cluster.url), cluster.busiest().data_dir.name
        names = [s.data_dir.name for s in cluster.servers]
        victim = {"leader": leader, "connected": busiest}.get(kind) or next(
            n for n in names if n not in (leader, busiest))
        server = cluster.server_named(victim)
        server.stop(kill=True)
        killed = time.monotonic()
        ready_after = None
        while time.monotonic() - killed < 30:
            if time.monotonic() - killed > 2 and not not_ready(urls):
                ready_after = time.monotonic() - killed
                break
            time.sleep(0.25)
        late = ready_after is None or ready_after > READY_WITHIN_S
        seen.append(f"{kind} {victim}: {'NOT READY' if late else 'ready'} "
                    f"{'after 30s' if ready_after is None else f'{ready_after:.1f}s'}")
        time.sleep(max(0.0, down_s - (time.monotonic() - killed)))
        server.start()
    return seen


def violations(text: str) -> int:
    found = [line for line in text.splitlines() if line.startswith("invariant violations:")]
    return int(found[-1].split(":")[1]) if found else -1


def one_run(kind: str, down_s: float) -> tuple[bool, str]:
    data = Path(tempfile.mkdtemp(prefix=f"demo-over-{kind}-"))
    broker = (EmbeddedNatsCluster(data / "nats") if kind == "nats-cluster" else EmbeddedKafka(data / "kafka")).start()
    try:
        up, urls = start_stack(broker.url, data)
        try:
            started = time.monotonic()
            simulate = subprocess.Popen(TIDAL + ["simulate", "--scenario", str(SCENARIO), "--bus", broker.url,
                                                 "--namespace", NAMESPACE, "--cluster", CLUSTER],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
            kills = kill_each(broker, urls, simulate, down_s) if kind == "nats-cluster" else []
            output, _ = simulate.communicate()
            took = time.monotonic() - started
            (data / "simulate.log").write_text(output)
            audit = subprocess.run(TIDAL + ["audit", "--bus", broker.url, "--namespace", NAMESPACE, "--cluster",
                                            CLUSTER], capture_output=True, text=True, cwd=ROOT)
        finally:
            up.send_signal(signal.SIGINT)
            up.wait(60)
    finally:
        broker.stop(kill=kind == "nats-cluster")
    run_v, audit_v = violations(output), violations(audit.stdout)
    ok = simulate.returncode == 0 and run_v == 0 and audit.returncode == 0 and audit_v == 0 and "[FAIL]" not in output \
        and not any("NOT READY" in k for k in kills)
    line = (f"simulate exit {simulate.returncode} in {took:.0f}s, violations {run_v}, audit after it {audit_v}"
            + (f"; kills: {'; '.join(kills)}" if kills else "") + f" ({data})")
    return ok, line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bus", choices=("nats-cluster", "kafka"), required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--down", type=float, default=12.0, help="seconds each killed server stays down")
    args = parser.parse_args()
    failed = 0
    for n in range(1, args.runs + 1):
        ok, line = one_run(args.bus, args.down)
        failed += not ok
        print(f"run {n}: {'ok' if ok else 'FAILED'}: {line}", flush=True)
    print(f"{args.runs - failed} of {args.runs} runs clean over {args.bus}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
