"""The HTTP endpoint every service serves: /healthz, /readyz, /metrics.

Plain asyncio, one request per connection: probes and Prometheus scrapes
need no more, and a web framework (aiohttp) cost every service about 12 MiB
of memory for three GET routes. A request whose head is larger than
`MAX_HEAD_BYTES` is answered 400; one slower than `READ_TIMEOUT_S` is dropped."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from http import HTTPStatus

import orjson
from prometheus_client import CONTENT_TYPE_LATEST

MAX_HEAD_BYTES = 8192
READ_TIMEOUT_S = 10.0
JSON = "application/json"


class HealthServer:
    """Liveness = the process answers; readiness = `ready()` says so (bus
    connected, consumers joined)."""

    def __init__(self, host: str, port: int, ready: Callable[[], tuple[bool, str]],
                 metrics: Callable[[], bytes], *, fd: int | None = None,
                 read_timeout_s: float = READ_TIMEOUT_S) -> None:
        self._host, self._port, self._fd, self._read_timeout_s = host, port, fd, read_timeout_s
        self._ready, self._metrics = ready, metrics
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task] = set()
        self.port: int | None = None

    async def start(self) -> None:
        if self._fd is not None:  # a socket already listening, handed down: nothing to bind
            self._server = await asyncio.start_server(self._serve, sock=socket.socket(fileno=self._fd),
                                                      limit=MAX_HEAD_BYTES)
        else:
            self._server = await asyncio.start_server(self._serve, self._host, self._port, limit=MAX_HEAD_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]  # the real port when 0 was asked

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._open):  # a client holding a connection open does not hold up the stop
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)
        await self._server.wait_closed()

    def answer(self, method: str, target: str) -> tuple[HTTPStatus, str, bytes]:
        """(status, content type, body) for one request."""
        path = target.split("?", 1)[0]
        routes = {"/healthz": self._healthz, "/readyz": self._readyz, "/metrics": self._metrics_page}
        if path not in routes:
            return HTTPStatus.NOT_FOUND, JSON, orjson.dumps({"error": f"no such path: {path}"})
        if method not in ("GET", "HEAD"):
            return HTTPStatus.METHOD_NOT_ALLOWED, JSON, orjson.dumps({"error": f"{method} not allowed"})
        return routes[path]()

    def _healthz(self) -> tuple[HTTPStatus, str, bytes]:
        return HTTPStatus.OK, JSON, orjson.dumps({"status": "ok"})

    def _readyz(self) -> tuple[HTTPStatus, str, bytes]:
        ok, why = self._ready()
        return (HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE), JSON, orjson.dumps({"ready": ok, "reason": why})

    def _metrics_page(self) -> tuple[HTTPStatus, str, bytes]:
        return HTTPStatus.OK, CONTENT_TYPE_LATEST, self._metrics()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._open.add(task)
        try:
            method, status, content_type, body = "GET", HTTPStatus.BAD_REQUEST, JSON, b""
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._read_timeout_s)
            except (asyncio.LimitOverrunError, ValueError):
                body = orjson.dumps({"error": f"request head over {MAX_HEAD_BYTES} bytes"})
            else:
                parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
                if len(parts) == 3 and parts[2].startswith("HTTP/1."):
                    method = parts[0]
                    status, content_type, body = self.answer(method, parts[1])
                else:
                    body = orjson.dumps({"error": "not an HTTP/1.x request line"})
            writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % (status, status.phrase.encode(), content_type.encode(), len(body)))
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass  # a client too slow, gone, or closing early: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._open.discard(task)
