"""One watch request, served: the ERROR 410 of a compacted resourceVersion,
else the backlog since it, then every change as a chunked JSON line, with
bookmarks when asked for, until `timeoutSeconds` or the client leaves. A
test ends or tears the stream by putting ("END", mode) in the watcher's
queue (see `KubeApiServer.break_watches`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from .protocol import Watcher
from .store import Store


async def serve_watch(request: web.Request, store: Store, watcher: Watcher,
                      bookmark_interval_s: float | None) -> web.StreamResponse:
    since = request.query.get("resourceVersion", "")
    timeout = float(request.query.get("timeoutSeconds", "1800"))
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    if store.expired(since):
        await _send(response, "ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                        "reason": "Expired", "code": 410,
                                        "message": f"too old resource version: {since} ({store.oldest_rv})"})
        await response.write_eof()
        return response
    # Backlog and registration happen without an await in between, so
    # no change falls between the two.
    for item in store.since(watcher, since):
        watcher.queue.put_nowait(item)
    store.watchers.append(watcher)
    ticker = asyncio.create_task(_tick(store, watcher, bookmark_interval_s)) \
        if watcher.bookmarks and bookmark_interval_s else None
    try:
        return await _pump(request, response, watcher, timeout)
    except ConnectionResetError:  # the client went away first
        return response
    finally:
        store.watchers.remove(watcher)
        if ticker is not None:
            ticker.cancel()


async def _pump(request: web.Request, response: web.StreamResponse, watcher: Watcher,
                timeout: float) -> web.StreamResponse:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        try:
            kind, obj = await asyncio.wait_for(watcher.queue.get(), timeout=max(left, 0.001))
        except asyncio.TimeoutError:
            await response.write_eof()  # timeoutSeconds reached: a clean end
            return response
        if kind != "END":
            await _send(response, kind, obj)
            continue
        if obj == "eof":
            await response.write_eof()
        else:
            if obj == "partial":
                await response.write(b'{"type": "MODIFIED", "object": {"metadata": {"na')
            if request.transport is not None:
                request.transport.abort()
        return response


async def _send(response: web.StreamResponse, kind: str, obj: dict[str, Any]) -> None:
    await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")


async def _tick(store: Store, watcher: Watcher, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        watcher.queue.put_nowait(store.bookmark(watcher.resource))
