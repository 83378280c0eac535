"""A whole Tidal stack on one machine: an embedded nats-server (unless an
external bus is given) and every service as its own process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tidal_bus.auth import redact_url
from tidal_bus.embedded import EmbeddedNats, _die_with_parent
from tidal_clock import elapsed
from tidal_runtime.settings import DEFAULT_CLUSTER

from .errors import CliError
from .options import make_dir
from .services import available, default_services
from .supervise import Backoff, Supervised, describe_exit
from .webhook_local import LocalWebhook, local_webhook


@dataclass
class RunningService:
    name: str
    process: subprocess.Popen
    listener: socket.socket  # its HTTP socket, held by the stack: the port stays the service's across restarts
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)  # its own settings, kept for a restart
    http_port: int = field(init=False)

    def __post_init__(self) -> None:
        self.http_port = self.listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=0.5) as response:
                return response.status == 200
        except OSError:
            return False


class Stack:
    def __init__(self, data_dir: Path, *, bus_url: str | None = None, nats_port: int | None = 4222,
                 namespace: str = "tidal", cluster: str = DEFAULT_CLUSTER, services: list[str] | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.external_bus = bus_url
        self.nats_port = nats_port
        self.namespace = namespace
        self.cluster = cluster
        known = available()
        unknown = sorted(set(services or []) - set(known))
        if unknown:
            raise CliError(f"unknown service(s) {', '.join(unknown)}; available: {', '.join(known) or 'none'}")
        self.service_names = services if services is not None else default_services()
        self.extra_env = extra_env or {}
        self.nats: EmbeddedNats | None = None
        self.services: list[RunningService] = []
        self.supervised: dict[str, Supervised] = {}  # by process name, for `supervise()`
        self.webhook: LocalWebhook | None = None  # its certificate and HTTPS socket, made once

    @property
    def bus_url(self) -> str:
        if self.external_bus:
            return self.external_bus
        assert self.nats is not None
        return self.nats.url

    def start(self) -> "Stack":
        make_dir(self.data_dir, "--data-dir")
        if not self.external_bus:
            port = self.nats_port
            if port and not _port_free(port):
                raise CliError(f"port {port} is in use (another nats-server?); pass --nats-port 0 or --bus URL",
                               exit_code=1)
            self.nats = EmbeddedNats(self.data_dir / "nats", port=port or None).start()
        logs = make_dir(self.data_dir / "logs", "--data-dir")
        for name in self.service_names:
            self.services.append(self._spawn(name, logs))
        return self

    def add(self, name: str, env: dict[str, str] | None = None) -> RunningService:
        """Start one more service (with settings of its own) on the running stack."""
        if name not in available():
            raise CliError(f"unknown service {name}; available: {', '.join(available())}")
        service = self._spawn(name, self.data_dir / "logs", env=env)
        self.services.append(service)
        return service

    def _spawn(self, name: str, logs: Path, listener: socket.socket | None = None,
               env: dict[str, str] | None = None) -> RunningService:
        # Bound here and handed down: a port merely found free could be taken (by any outgoing
        # connection's ephemeral port) before the service binds it.
        listener = listener or _listening_socket()
        own = dict(env or {})
        env = dict(os.environ)
        env.update({
            "TIDAL_BUS_URL": self.bus_url, "TIDAL_NAMESPACE": self.namespace, "TIDAL_CLUSTER": self.cluster,
            f"TIDAL_{name.upper()}_HTTP_FD": str(listener.fileno()),
        })
        # On one machine the node agent keeps its checkpoint with the stack's data,
        # not in /var/lib/tidal (the DaemonSet's host path).
        env.setdefault("TIDAL_TOPOLOGY_STATE_FILE", str((self.data_dir / "cpu-state.json").resolve()))
        env.setdefault("TIDAL_SIMULATOR_DATA_DIR", str(self.data_dir.resolve()))
        fds = [listener.fileno()]
        if name == "webhook":  # a throw-away certificate, and an HTTPS socket kept like the HTTP one
            self.webhook = self.webhook or local_webhook(self.data_dir)
            env.update(self.webhook.env())
            fds.append(self.webhook.listener.fileno())
        env.update(self.extra_env)
        env.update(own)
        log_path = logs / f"{name}.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", "tidal_cli.main", "run", name], env=env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=_die_with_parent, pass_fds=tuple(fds))
        return RunningService(name, process, listener, log_path, own)

    def wait_ready(self, timeout: float = 60.0, services: list[RunningService] | None = None, *,
                   restarting: tuple[Backoff, Callable[[str], None]] | None = None) -> None:
        """Wait until every service (or those given) answers /readyz. A crash
        on the way fails the wait, unless `restarting` (a policy and where to
        say so) is given: then the crashed one is started again, as `tidal up`
        does later (a cluster still electing can fail a first start)."""
        deadline = elapsed() + timeout
        names = [s.name for s in (self.services if services is None else services)]
        while names:
            if restarting is None:
                self.check_alive()
            else:
                self.supervise(*restarting)
            names = [name for name in names if not self.service(name).ready()]
            if names and elapsed() > deadline:
                raise CliError(f"not ready after {timeout:.0f}s: {', '.join(names)} "
                               f"(see {self.service(names[0]).log_path})", exit_code=1)
            time.sleep(0.1)

    def service(self, name: str) -> RunningService:
        """The running service called `name`."""
        for service in self.services:
            if service.name == name:
                return service
        raise CliError(f"no service {name!r} in this stack ({', '.join(s.name for s in self.services)})")

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 20.0) -> int:
        """Send `sig` to service `name` (SIGKILL: a crash, nothing cleaned up)
        and wait for it to exit; its exit code."""
        process = self.service(name).process
        if process.poll() is None:
            process.send_signal(sig)
        return process.wait(timeout)

    def restart(self, name: str) -> RunningService:
        """Start service `name` again after it exited (or was killed): same
        settings and HTTP port, its log appended to."""
        old = self.service(name)
        if old.process.poll() is None:
            raise CliError(f"service {name} is still running (pid {old.process.pid}); kill it first", exit_code=1)
        new = self._spawn(name, old.log_path.parent, listener=old.listener, env=old.env)
        self.services[self.services.index(old)] = new
        return new

    def supervise(self, policy: Backoff, say: Callable[[str], None], now: float | None = None) -> bool:
        """Start crashed processes again (the embedded nats-server too) with
        exponential back-off, saying so in a line each time; True when
        something changed (an exit seen or a process started)."""
        now = elapsed() if now is None else now
        changed = False
        processes: list[tuple[str, int | None]] = [(s.name, s.process.poll()) for s in self.services]
        if self.nats is not None:
            processes.insert(0, ("nats", self.nats.returncode))
        for name, code in processes:
            state = self.supervised.setdefault(name, Supervised(name, started_at=now))
            if code is None:
                continue
            if state.restart_at is None:
                delay = state.exited(code, now, policy)
                last = _last_line(self.nats.log_path if name == "nats" else self.service(name).log_path)
                say(f"{name} exited with {describe_exit(code)} ({last}); restarting in {delay:g}s "
                    f"(restart {state.restarts + 1})")
                changed = True
            elif state.due(now):
                if name == "nats":
                    assert self.nats is not None
                    self.nats.start()  # same port and store
                    pid = self.nats.pid
                else:
                    pid = self.restart(name).process.pid
                state.restarted(now)
                say(f"{name} restarted (pid {pid}, restart {state.restarts})")
                changed = True
        return changed

    def status(self) -> dict:
        """What runs, for `tidal up`'s status file: pids, ports, restarts."""
        def entry(name: str, pid: int | None, running: bool) -> dict:
            state = self.supervised.get(name)
            return {"pid": pid, "running": running, "restarts": state.restarts if state else 0,
                    "last_exit": state.last_exit if state else None}

        found = {}
        if self.nats is not None:
            found["nats"] = {**entry("nats", self.nats.pid, self.nats.running), "url": self.nats.url}
        for s in self.services:
            found[s.name] = {**entry(s.name, s.process.pid, s.process.poll() is None), "url": s.url,
                             "log": str(s.log_path)}
        return {"bus": redact_url(self.bus_url), "namespace": self.namespace, "cluster": self.cluster,
                "supervisor_pid": os.getpid(), "processes": found}

    def write_status(self) -> Path:
        """Write `status()` to DATA_DIR/status.json (read by `tidal up --status`)."""
        path = self.data_dir / STATUS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.status(), indent=2) + "\n")
        tmp.replace(path)
        return path

    def check_alive(self) -> None:
        for service in self.services:
            code = service.process.poll()
            if code is not None:
                raise CliError(f"service {service.name} exited with {code}: {_last_line(service.log_path)}",
                               exit_code=1)

    def describe(self) -> str:
        lines = [f"bus        {redact_url(self.bus_url)}  (namespace {self.namespace}, cluster {self.cluster})"]
        if self.nats is not None:
            lines.append(f"nats       pid {self.nats.pid}  data {self.nats.data_dir}{self._restarts('nats')}")
        for s in self.services:
            lines.append(f"{s.name:<10} pid {s.process.pid}  {s.url}/metrics  log {s.log_path}{self._restarts(s.name)}")
        if not self.services:
            lines.append("(no services installed yet)")
        if self.webhook is not None:
            lines.append(f"{'':<10} AdmissionReviews at {self.webhook.url}  CA {self.webhook.folder / 'ca.crt'}")
        return "\n".join(lines)

    def _restarts(self, name: str) -> str:
        state = self.supervised.get(name)
        return f"  restarts {state.restarts}" if state else ""

    def stop(self, timeout: float = 20.0) -> None:
        for service in self.services:
            if service.process.poll() is None:
                service.process.send_signal(signal.SIGTERM)
        deadline = elapsed() + timeout
        for service in self.services:
            try:
                service.process.wait(max(deadline - elapsed(), 0.1))
            except subprocess.TimeoutExpired:
                service.process.kill()
                service.process.wait()
            service.listener.close()
        if self.nats is not None:
            self.nats.stop()

    def __enter__(self) -> "Stack":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


STATUS_FILE = "status.json"


def _listening_socket() -> socket.socket:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.set_inheritable(True)
    return listener


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"
