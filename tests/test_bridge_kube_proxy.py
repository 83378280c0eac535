"""The bridge's API client reads the environment's proxy settings once, at
connect, not on every request: with no proxy for the API server it makes
its calls directly; with one, every call still goes through it."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from fake_kube_api import FakeKubeApi
from tidal_bridge.kube import Kube
from tidal_bridge.settings import BridgeSettings


class ForwardingProxy:
    """A plain-HTTP forward proxy on localhost that records each request line."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> "ForwardingProxy":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line = head.split(b"\r\n", 1)[0].decode()
        self.requests.append(line)
        target = line.split()[1].split("/")[2]  # "GET http://host:port/path HTTP/1.1"
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        up_writer.write(head)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)


@contextlib.asynccontextmanager
async def connected(fake):
    kube = await Kube.connect(BridgeSettings(kube_api_url=fake.url, request_timeout_s=5))
    try:
        yield kube
    finally:
        await kube.close()


@pytest.fixture
async def fake():
    async with FakeKubeApi() as server:
        server.add_node("n1")
        yield server


async def test_no_proxy_for_the_api_server_means_no_per_request_lookup(fake, monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with connected(fake) as kube:
        assert kube.api_client.rest_client.pool_manager.trust_env is False
        assert (await kube.get_node("n1"))["metadata"]["name"] == "n1"


async def test_an_environment_proxy_still_carries_every_call(fake, monkeypatch):
    async with ForwardingProxy() as proxy:
        for name in ("HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        async with connected(fake) as kube:
            assert kube.api_client.rest_client.pool_manager.trust_env is True
            assert (await kube.get_node("n1"))["metadata"]["name"] == "n1"
    assert [line.split()[0] for line in proxy.requests] == ["GET"]
    assert all(f"{fake.url}/api/v1/nodes/n1" in line for line in proxy.requests), proxy.requests


async def test_no_proxy_exempts_the_api_server(fake, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there: a call through it fails
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with connected(fake) as kube:
        assert (await kube.get_node("n1"))["metadata"]["name"] == "n1"
