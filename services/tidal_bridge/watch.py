"""List-then-watch of one resource (pods, nodes, tenants), like client-go's
reflector, handing every change to a sink exactly once.

    relist:  list (consistent read, in pages of PAGE items as client-go's
             pager asks: never the whole list in memory) → for each item:
             ADDED / MODIFIED if its (uid, resourceVersion) is new, after
             DELETED of another uid known under its name; every known uid
             missing from the list → DELETED; resume from the list's
             resourceVersion. A page's snapshot gone (410) → relist.
    watch:   watch?resourceVersion=<last>&allowWatchBookmarks=true; each
             event is applied, then its resourceVersion becomes <last>;
             BOOKMARK only moves <last>. A clean end (server timeout) → watch
             again from <last>. 410 Gone (ERROR event or status) → relist.
             A broken connection, a torn line or an error status →
             back off (initial·2^n, capped) and watch again from <last>.

Nothing is lost: <last> only moves after the sink accepted the event, so a
failure replays from the last event handled. Nothing is doubled: a change
whose (uid, resourceVersion) was already handed over is dropped, and a
DELETED is handed over once per uid.

The last state of every object is kept (`keep` may slim it, or keep it
in a form of its own that `read_kept` reads back) and found by name with
`get`: a cache as the informers' of kube-scheduler, as current as
the watch, for reads that a precondition on the write makes safe.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from .errors import BridgeError, KubeStatusError, KubeUnavailable, WatchExpired
from .kube import TRANSPORT_ERRORS, Kube, decode_json
from .settings import BridgeSettings

log = logging.getLogger(__name__)

PAGE = 500  # items a list page asks for (client-go's pager's default)

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class Change:
    """One object the sink has not seen in this state before."""

    type: ChangeType
    object: dict[str, Any]


Sink = Callable[[Change], Awaitable[None]]


class Backoff:
    """Delays initial·2^n capped at `maximum`; `reset()` after progress."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial, self.maximum, self.failures = initial, maximum, 0

    def next(self) -> float:
        delay = min(self.initial * 2 ** self.failures, self.maximum)
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


@dataclass
class WatchStats:
    """What a reflector has done, counted (metrics.py exports them)."""

    lists: int = 0  # relists completed
    watches: int = 0  # watch requests opened
    ended: int = 0  # watches the server ended cleanly (timeoutSeconds): watched again from <last>
    expired: int = 0  # 410 Gone: relisted
    failures: int = 0  # a list, a watch or the sink failed: backed off, watched again from <last>
    bookmarks: int = 0


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


class Reflector:
    """Keeps a sink in step with one resource; `run()` until cancelled."""

    @classmethod
    def of(cls, kube: Kube, resource: str, sink: Sink, settings: BridgeSettings, **options: Any) -> "Reflector":
        """A reflector with the bridge's watch timeout and back-off."""
        return cls(kube, resource, sink, timeout_s=settings.watch_timeout_s,
                   backoff=Backoff(settings.backoff_initial_s, settings.backoff_max_s), **options)

    def __init__(self, kube: Kube, resource: str, sink: Sink, *,
                 field_selector: str | None = None, accept: Callable[[dict[str, Any]], bool] | None = None,
                 timeout_s: int = 300, backoff: Backoff | None = None,
                 keep: Callable[[dict[str, Any]], Any] | None = None,
                 read_kept: Callable[[Any], dict[str, Any]] | None = None, page_size: int = PAGE) -> None:
        self.kube = kube
        self.resource = resource
        self.sink = sink
        self.field_selector = field_selector
        self.accept = accept or (lambda obj: True)
        self.timeout_s = timeout_s
        self.backoff = backoff or Backoff(0.5, 30.0)
        self.resource_version: str | None = None
        self.known: dict[str, tuple[str, Any]] = {}  # uid -> (resourceVersion, last object as kept)
        self.keep = keep or (lambda obj: obj)
        self.read_kept = read_kept or (lambda kept: kept)
        self.page_size = page_size
        self._uids: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid of the object of that name now
        self.stats = WatchStats()
        self.synced = asyncio.Event()

    def names(self) -> set[tuple[str, str]]:
        """(namespace, name) of every object known now."""
        return set(self._uids)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object of that name as last seen (as kept), None when none is known."""
        uid = self._uids.get((namespace, name))
        return None if uid is None else self.read_kept(self.known[uid][1])

    async def run(self) -> None:
        while True:
            relisted = False
            try:
                if self.resource_version is None:
                    relisted = True
                    await self._relist()
                productive = await self._watch()
                self.stats.ended += 1
            except WatchExpired:
                log.info("%s watch: resourceVersion %s expired (410); relisting", self.resource, self.resource_version)
                self.stats.expired += 1
                self.resource_version = None
                if relisted:  # expired straight after a fresh list: do not spin on it
                    await asyncio.sleep(self.backoff.next())
                continue
            except Exception as exc:  # API, transport or sink failure: retry from the last handled event
                self.stats.failures += 1
                delay = self.backoff.next()
                if isinstance(exc, KubeStatusError) and exc.code == 404:  # the resource itself is not served
                    log.warning("%s watch: the API server serves no %s (404): is its CustomResourceDefinition "
                                "installed (k8s/base/crds)? retrying in %.1fs", self.resource, self.resource, delay)
                else:
                    log.warning("%s watch failed (%s: %s); retrying in %.1fs", self.resource, type(exc).__name__,
                                exc, delay, exc_info=not isinstance(exc, BridgeError))
                await asyncio.sleep(delay)
                continue
            if productive:
                self.backoff.reset()
            else:  # a server that ends every watch at once must not be hammered
                await asyncio.sleep(self.backoff.next())

    async def _relist(self) -> None:
        present, version = set(), ""
        try:
            async for page in self.kube.list_pages(self.resource, self.field_selector, limit=self.page_size):
                for obj in page.get("items") or []:
                    if self.accept(obj):
                        present.add(_meta(obj).get("uid"))
                        await self._apply("MODIFIED", obj)
                version = str(_meta(page).get("resourceVersion") or "")
        except KubeStatusError as exc:
            if exc.code == 410:  # the list's snapshot is gone before its last page: list again
                raise WatchExpired(exc.message) from exc
            raise
        self.stats.lists += 1
        for uid in [uid for uid in self.known if uid not in present]:
            await self._apply("DELETED", self.read_kept(self.known[uid][1]))
        self.resource_version = version
        self.synced.set()

    async def _watch(self) -> bool:
        """One watch request; True when it delivered anything."""
        try:
            response = await self.kube.watch(self.resource, self.resource_version or "",
                                             field_selector=self.field_selector, timeout_s=self.timeout_s)
        except KubeStatusError as exc:
            if exc.code == 410:
                raise WatchExpired(exc.message) from exc
            raise
        self.stats.watches += 1
        productive = False
        try:
            while True:
                try:
                    line = await response.content.readline()
                except (*TRANSPORT_ERRORS, ValueError) as exc:
                    raise KubeUnavailable(f"{self.resource} watch stream broke: {type(exc).__name__}: {exc}") from exc
                if not line:
                    return productive  # the server ended the watch (timeoutSeconds)
                productive = True
                await self._event(line)
        finally:
            response.close()

    async def _event(self, line: bytes) -> None:
        try:
            event = decode_json(line)
            kind, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError):
            raise KubeUnavailable(f"{self.resource} watch: torn or malformed line {line[:120]!r}") from None
        if kind == "ERROR":
            code = int(obj.get("code") or 0) if isinstance(obj, dict) else 0
            if code == 410:
                raise WatchExpired(str(obj.get("message", "")))
            raise KubeStatusError.from_status(code or 500, obj)
        version = str(_meta(obj).get("resourceVersion") or "")
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
        elif kind in ("ADDED", "MODIFIED", "DELETED"):
            await self._apply(kind, obj)
        if version:
            self.resource_version = version

    async def _apply(self, kind: ChangeType, obj: dict[str, Any]) -> None:
        meta = _meta(obj)
        meta.pop("managedFields", None)  # large and unused: not worth keeping per object
        uid, version = meta.get("uid") or "", str(meta.get("resourceVersion") or "")
        name = (meta.get("namespace") or "", meta.get("name") or "")
        if kind == "DELETED" or not self.accept(obj):
            if uid in self.known:
                await self.sink(Change("DELETED", obj))
                del self.known[uid]
                if self._uids.get(name) == uid:  # not yet taken by a successor of the name
                    del self._uids[name]
            return
        previous = self.known.get(uid)
        if previous is not None and previous[0] == version:
            return  # seen in this very state: a replay across a reconnect
        predecessor = self._uids.get(name)
        if predecessor is not None and predecessor != uid and predecessor in self.known:
            # A name is one object's at a time, so the one known under it is gone; a relist lists
            # its successor before finding it missing. Its DELETED goes first: the pod events'
            # readers key pods by name, and a deletion after the successor would remove the successor.
            await self._apply("DELETED", self.read_kept(self.known[predecessor][1]))
        await self.sink(Change("ADDED" if previous is None else "MODIFIED", obj))
        self.known[uid] = (version, self.keep(obj))
        self._uids[name] = uid

