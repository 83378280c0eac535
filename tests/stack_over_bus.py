"""`tidal up --bus` over an external broker, for tests: start the stack
until it says ready, ask every service's /readyz, stop it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

CLI = [sys.executable, "-m", "tidal_cli.main"]
# The scenarios run against this stack expect evictions and freezes carried out (their default is dry-run).
ACTIONS = Path(__file__).resolve().parents[1] / "examples" / "demo" / "actions.yaml"


def readiness(urls: dict[str, str]) -> dict[str, str]:
    """Service -> why it is not ready (empty: every one is)."""
    not_ready = {}
    for name, url in urls.items():
        try:
            urllib.request.urlopen(url + "/readyz", timeout=2).read()
        except urllib.error.HTTPError as exc:
            not_ready[name] = exc.read().decode(errors="replace")
        except OSError as exc:
            not_ready[name] = str(exc)
    return not_ready


def wait_for(condition, timeout: float, what: str, pause: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(pause)
    raise AssertionError(f"{what} not within {timeout:g}s")


def start_stack(url: str, namespace: str, data_dir: Path, services: str | None = None) -> tuple[subprocess.Popen,
                                                                                                 dict[str, str]]:
    argv = CLI + ["up", "--bus", url, "--namespace", namespace, "--cluster", "sim", "--data-dir", str(data_dir),
                  "--config", str(ACTIONS)]
    up = subprocess.Popen(argv + (["--services", services] if services else []), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in up.stdout:
        seen.append(line)
        if line.startswith("ready;"):
            break
    assert seen and seen[-1].startswith("ready;"), "".join(seen)
    status = json.loads((data_dir / "status.json").read_text())
    return up, {name: p["url"] for name, p in status["processes"].items() if name != "nats"}


def stop_stack(up: subprocess.Popen) -> None:
    up.send_signal(signal.SIGINT)
    try:
        up.wait(60)
    except subprocess.TimeoutExpired:
        up.kill()
