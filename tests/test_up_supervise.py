"""`tidal up` supervises (issue 17, item 6): a process killed -9 (a service,
or the embedded nats-server) is started again with exponential back-off and
a line saying so; the stack keeps running until Ctrl-C; `tidal up --status`
shows the restarts."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from conftest import ROOT, patience
from tidal_cli.supervise import Backoff, Supervised

TIDAL = [sys.executable, "-m", "tidal_cli.main"]


@pytest.mark.parametrize("failures, delay", [(1, 1), (2, 2), (3, 4), (5, 16), (6, 30), (200, 30)])
def test_backoff_doubles_up_to_the_cap(failures, delay):
    assert Backoff(base_s=1, cap_s=30).delay(failures) == delay


def test_a_stable_run_starts_the_count_again():
    policy = Backoff(base_s=1, cap_s=30, stable_s=60)
    state = Supervised("scoring", started_at=0.0)
    assert state.exited(1, now=5.0, policy=policy) == 1   # quick exit: 1 s
    assert not state.due(5.5) and state.due(6.0)
    state.restarted(6.0)
    assert state.exited(1, now=7.0, policy=policy) == 2   # again at once: 2 s
    state.restarted(9.0)
    assert state.exited(1, now=9.5, policy=policy) == 4
    state.restarted(14.0)
    assert state.exited(1, now=14.0 + 600, policy=policy) == 1  # ran ten minutes: back to 1 s
    assert state.restarts == 3 and state.last_exit == 1


class Up:
    """`tidal up` as a user runs it, its output read line by line."""

    def __init__(self, data_dir) -> None:
        self.data_dir = data_dir
        self.process = subprocess.Popen(
            [*TIDAL, "up", "--nats-port", "0", "--data-dir", str(data_dir), "--services", "scoring",
             "--restart-delay", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            env=os.environ.copy(), start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, fragment: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + patience(timeout)
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                assert self.process.poll() is None, "tidal up exited:\n" + "\n".join(self.seen)
                continue
            self.seen.append(line)
            if fragment in line:
                return line
        raise AssertionError(f"no {fragment!r} within {patience(timeout):g}s:\n" + "\n".join(self.seen))

    def status(self) -> dict:
        return json.loads((self.data_dir / "status.json").read_text())


def _ready(url: str) -> bool:
    """One look of a poll (the poll's deadline is the hang guard): a service
    restarting behind the socket the stack holds does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + patience(timeout)
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_killed_service_and_nats_are_restarted_and_only_ctrl_c_stops_the_stack(tmp_path):
    up = Up(tmp_path)
    try:
        up.wait_for("ready; Ctrl-C stops everything", timeout=90)
        before = up.status()["processes"]
        assert before["scoring"]["restarts"] == 0 and before["nats"]["restarts"] == 0

        os.kill(before["scoring"]["pid"], signal.SIGKILL)
        line = up.wait_for("scoring exited")
        assert "signal 9 (SIGKILL)" in line and "restarting in 0.2s (restart 1)" in line
        with pytest.raises(OSError, match="in use"):  # the stack holds the port: nothing takes it meanwhile
            socket.create_server(("127.0.0.1", int(before["scoring"]["url"].rsplit(":", 1)[1]))).close()
        up.wait_for("scoring restarted")
        _wait(lambda: up.status()["processes"]["scoring"]["restarts"] == 1, 10, "the status file")
        scoring = up.status()["processes"]["scoring"]
        assert scoring["pid"] != before["scoring"]["pid"] and scoring["last_exit"] == -9
        assert scoring["url"] == before["scoring"]["url"]  # its socket held by the stack meanwhile
        _wait(lambda: _ready(scoring["url"]), 60, "the restarted scoring to be ready")

        os.kill(before["nats"]["pid"], signal.SIGKILL)
        up.wait_for("nats exited")
        up.wait_for("nats restarted")
        _wait(lambda: up.status()["processes"]["nats"]["restarts"] == 1, 10, "the status file")
        _wait(lambda: _ready(scoring["url"]), 60, "scoring to reconnect to the restarted nats-server")

        shown = subprocess.run([*TIDAL, "up", "--status", "--data-dir", str(tmp_path)], capture_output=True,
                               text=True, timeout=patience(60), cwd=ROOT)
        assert shown.returncode == 0, shown.stderr
        assert "running" in shown.stdout.splitlines()[0]
        rows = {line.split()[0]: line for line in shown.stdout.splitlines()[1:]}
        assert "up" in rows["scoring"] and "restarts 1" in rows["scoring"] and "last exit -9" in rows["scoring"]
        assert "restarts 1" in rows["nats"]
        assert up.process.poll() is None  # two crashes, and the stack is still up
    finally:
        if up.process.poll() is None:
            up.process.send_signal(signal.SIGINT)  # Ctrl-C
        code = up.process.wait(60)
    assert code == 0
    remaining = "\n".join(up.lines.get() for _ in range(up.lines.qsize()))
    assert "stopped" in remaining or "stopped" in up.seen
