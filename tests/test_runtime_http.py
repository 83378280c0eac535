"""The health and metrics endpoint over a real socket: the three routes as
probes and Prometheus read them, and hostile or broken requests answered
with a clear status (or dropped when too slow) without harming the server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

import pytest

from tidal_runtime.http import MAX_HEAD_BYTES, HealthServer
from conftest import patience


@pytest.fixture
async def server():
    state = {"ready": (False, "joining consumer groups: pod.lifecycle")}
    http = HealthServer("127.0.0.1", 0, lambda: state["ready"], lambda: b"tidal_up 1\n", read_timeout_s=0.5)
    await http.start()
    yield http, state
    await http.stop()


async def _exchange(port: int, request: bytes) -> tuple[int, dict, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    response = await asyncio.wait_for(reader.read(), patience(5))
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), headers, body


def _get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


async def test_health_readiness_and_metrics(server):
    http, state = server
    status, headers, body = await _exchange(http.port, _get("/healthz"))
    assert (status, json.loads(body)) == (200, {"status": "ok"})
    assert headers["Content-Type"] == "application/json" and int(headers["Content-Length"]) == len(body)
    status, _, body = await _exchange(http.port, _get("/readyz"))
    assert (status, json.loads(body)) == (503, {"ready": False, "reason": "joining consumer groups: pod.lifecycle"})
    state["ready"] = (True, "ok")
    status, _, body = await _exchange(http.port, _get("/readyz?verbose=1"))
    assert (status, json.loads(body)) == (200, {"ready": True, "reason": "ok"})
    status, headers, body = await _exchange(http.port, _get("/metrics"))
    assert status == 200 and body == b"tidal_up 1\n" and headers["Content-Type"].startswith("text/plain")
    status, headers, body = await _exchange(http.port, _get("/metrics", "HEAD"))
    assert status == 200 and body == b"" and headers["Content-Length"] == "11"


async def test_a_socket_handed_down_is_served_instead_of_binding_host_and_port():
    listener = socket.create_server(("127.0.0.1", 0))  # as `tidal up` binds it, before the service starts
    port = listener.getsockname()[1]
    # binding host:port would fail: the socket handed down holds that port
    http = HealthServer("127.0.0.1", port, lambda: (True, "ok"), lambda: b"", fd=listener.detach())
    await http.start()
    try:
        assert http.port == port
        status, _, body = await _exchange(port, _get("/readyz"))
        assert (status, json.loads(body)) == (200, {"ready": True, "reason": "ok"})
    finally:
        await http.stop()


@pytest.mark.parametrize("request_bytes, status", [
    (_get("/nope"), 404),
    (_get("/healthz", "POST"), 405),
    (b"HELLO\r\n\r\n", 400),
    (b"GET /healthz\r\n\r\n", 400),  # HTTP/0.9 style: no version
    (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n", 400),
])
async def test_a_bad_request_gets_a_clear_status(server, request_bytes, status):
    http, _ = server
    got, _, body = await _exchange(http.port, request_bytes)
    assert got == status and json.loads(body)["error"]
    assert (await _exchange(http.port, _get("/healthz")))[0] == 200, "the server still answers"


async def test_a_client_that_never_finishes_its_request_is_dropped(server):
    http, _ = server
    reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
    writer.write(b"GET /healthz HTTP/1.1\r\n")  # and nothing more
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), patience(5)) == b"", "closed without an answer after the read timeout"
    writer.close()
    assert (await _exchange(http.port, _get("/healthz")))[0] == 200


async def test_stop_does_not_wait_for_a_client_holding_its_connection(server):
    http, _ = server
    reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(http.stop(), patience(2))
    writer.close()


def test_the_services_load_neither_aiohttp_nor_its_memory():
    # nats-py would import aiohttp for a websocket transport Tidal does not use (tidal_bus._lean_nats)
    code = ("import sys, tidal_placement.service, tidal_scoring.service, tidal_oversell.service, "
            "tidal_remediation.service, tidal_topology.service, tidal_cli.main; print('aiohttp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
