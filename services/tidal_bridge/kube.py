"""The bridge's calls to the API server, over kubernetes-asyncio.

Every call is made with `_preload_content=False` and the JSON read here:

- the generated client deserialises a Binding's response (a Status) as a
  V1Binding and fails on the missing `target` (kubernetes-client/python
  #547); evictions answer with a Status too;
- the pod sink works on the API's JSON (annotations, quantities) anyway, so
  building models for every watched object would be wasted work;
- with `_preload_content=False` the client does not check the status code,
  so `_checked` does: an error Status becomes `KubeStatusError(code, reason,
  message)`, a transport failure `KubeUnavailable`.

Every request, a watch's too (until its response starts), is told to
`observer` with its HTTP method, the resource it names (`pods/binding`,
`tenants/status`: resource/subresource), its status code (`<error>` when
none came, as client-go says) and its duration on the `elapsed()` stopwatch.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import AsyncIterator
from typing import Any, Protocol

import aiohttp
import orjson
import yarl
from kubernetes_asyncio import client, config

from tidal_clock import elapsed
from tidal_schemas.tenancy import GROUP, VERSION

from .errors import KubeStatusError, KubeUnavailable
from .settings import BridgeSettings

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"  # lists with a merge key (conditions) merge, not replace
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
NO_CODE = "<error>"  # a request that got no answer (client-go's code label for it)


class RequestObserver(Protocol):
    """Told of every API request the bridge makes (metrics.py counts them)."""

    def request(self, method: str, resource: str, code: str, seconds: float) -> None: ...


class NoObserver:
    def request(self, method: str, resource: str, code: str, seconds: float) -> None:
        pass


async def kube_configuration(settings: BridgeSettings) -> client.Configuration:
    """`kube_api_url` as is; else the kubeconfig named; else in-cluster
    (service account) when running in a pod; else ~/.kube/config."""
    return await configuration_for(settings.kube_api_url, settings.kubeconfig, settings.kube_context)


async def configuration_for(url: str | None = None, kubeconfig: str | None = None,
                            context: str | None = None) -> client.Configuration:
    """The client configuration kubectl would use: `url` as is; else the
    kubeconfig named (else $KUBECONFIG, else ~/.kube/config) and its
    `context`; in a pod, unless a kubeconfig is named, in-cluster
    (service account)."""
    if url:
        return client.Configuration(host=url.rstrip("/"))
    configuration = client.Configuration()
    if kubeconfig or "KUBERNETES_SERVICE_HOST" not in os.environ:
        # persist_config=False: a token refresh must not rewrite the operator's file
        await config.load_kube_config(config_file=kubeconfig, context=context,
                                      client_configuration=configuration, persist_config=False)
    else:
        config.load_incluster_config(client_configuration=configuration)
    return configuration


def env_proxy_applies(url: str) -> bool:
    """Whether HTTP(S)_PROXY / NO_PROXY send requests to `url` through a proxy."""
    try:
        aiohttp.helpers.get_env_proxy_for_url(yarl.URL(url))
    except LookupError:
        return False
    return True


class Kube:
    """The few API calls the bridge makes, returning the API's JSON."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout_s: float = 10.0) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.request_timeout_s = request_timeout_s
        self.observer: RequestObserver = NoObserver()

    @classmethod
    async def connect(cls, settings: BridgeSettings) -> "Kube":
        configuration = await kube_configuration(settings)
        api_client = client.ApiClient(configuration)
        if not await asyncio.to_thread(env_proxy_applies, configuration.host):
            # kubernetes-asyncio's session trusts the environment, so aiohttp looks up the
            # proxy variables and ~/.netrc in a worker thread on every request: two thread
            # hops per call, a quarter of the bridge's CPU at 20 pods/s. Without a proxy
            # for the API server there is nothing to look up (the API server does not
            # take .netrc credentials; kubectl does not read it either).
            api_client.rest_client.pool_manager._trust_env = False
        return cls(api_client, request_timeout_s=settings.request_timeout_s)

    async def close(self) -> None:
        await self.api_client.close()

    @property
    def host(self) -> str:
        """host:port of the API server (client-go's `host` label)."""
        url = yarl.URL(self.api_client.configuration.host)
        return f"{url.host}:{url.port}" if url.port else str(url.host)

    # -- plumbing ---------------------------------------------------------------
    async def _call(self, request: tuple[str, str], method, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """`method` called; `request` is (HTTP method, resource) for the observer."""
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        started, code = elapsed(), NO_CODE
        try:
            response = await method(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
            code = str(response.status)
            try:
                body = await response.read()
            finally:
                response.release()
        except TRANSPORT_ERRORS as exc:
            raise KubeUnavailable(f"{getattr(method, '__name__', 'call')}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.observer.request(*request, code, elapsed() - started)
        return _checked(response.status, body)

    # -- pods -------------------------------------------------------------------
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return await self._call(("GET", "pods"), self.core.read_namespaced_pod, name, namespace)

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("PATCH", "pods/status"), self.core.patch_namespaced_pod_status, name, namespace,
                                patch, _content_type=STRATEGIC_PATCH)

    async def bind(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("POST", "pods/binding"), self.core.create_namespaced_pod_binding, name, namespace,
                                body)

    async def evict(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("POST", "pods/eviction"), self.core.create_namespaced_pod_eviction, name,
                                namespace, body)

    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("POST", "events"), self.core.create_namespaced_event, namespace, body)

    async def list_events(self, namespace: str, field_selector: str) -> dict[str, Any]:
        """The namespace's events the field selector picks (kubectl describe's
        `involvedObject.name=…,involvedObject.namespace=…`)."""
        return await self._call(("GET", "events"), self.core.list_namespaced_event, namespace,
                                field_selector=field_selector)

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("PATCH", "events"), self.core.patch_namespaced_event, name, namespace, patch,
                                _content_type=STRATEGIC_PATCH)

    # -- nodes ------------------------------------------------------------------
    async def get_node(self, name: str) -> dict[str, Any]:
        return await self._call(("GET", "nodes"), self.core.read_node, name)

    async def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("PATCH", "nodes"), self.core.patch_node, name, patch, _content_type=MERGE_PATCH)

    # -- Tidal's custom resources (cluster-scoped, group tidal.dev) --------------
    async def create_custom(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("POST", plural), self.custom.create_cluster_custom_object, GROUP, VERSION, plural,
                                body)

    async def patch_custom_status(self, plural: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return await self._call(("PATCH", f"{plural}/status"), self.custom.patch_cluster_custom_object_status,
                                GROUP, VERSION, plural, name, patch, _content_type=MERGE_PATCH)

    # -- list and watch ---------------------------------------------------------
    def _lister(self, resource: str):
        """pods, nodes, or the plural of one of Tidal's custom resources."""
        if resource in ("pods", "nodes"):
            return {"pods": self.core.list_pod_for_all_namespaces, "nodes": self.core.list_node}[resource]
        return functools.partial(self.custom.list_cluster_custom_object, GROUP, VERSION, resource)

    async def list_pages(self, resource: str, field_selector: str | None = None, *,
                         limit: int) -> AsyncIterator[dict[str, Any]]:
        """A consistent list (`pods` of every namespace, `nodes`, or custom
        resources) in pages of up to `limit` items, as client-go's pager asks
        (`limit`, then `continue`): one snapshot, never all of it in memory
        at once. A `continue` token the server no longer serves raises 410."""
        options: dict[str, Any] = {"field_selector": field_selector} if field_selector else {}
        while True:
            page = await self._call(("GET", resource), self._lister(resource), limit=limit, **options)
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            options["_continue"] = token

    async def watch(self, resource: str, resource_version: str, *, field_selector: str | None = None,
                    timeout_s: int = 300) -> aiohttp.ClientResponse:
        """Open a watch from `resource_version` with bookmarks; the caller
        reads its JSON lines and must release it. An error status raises."""
        options: dict[str, Any] = {"field_selector": field_selector} if field_selector else {}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.request_timeout_s,
                                        sock_read=timeout_s + self.request_timeout_s)
        started, code = elapsed(), NO_CODE
        try:
            response = await self._lister(resource)(
                watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                timeout_seconds=timeout_s, _preload_content=False, _request_timeout=timeout, **options)
            code = str(response.status)
        except TRANSPORT_ERRORS as exc:
            raise KubeUnavailable(f"watch {resource}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.observer.request("GET", resource, code, elapsed() - started)
        if response.status >= 300:
            try:
                body = await response.read()
            except TRANSPORT_ERRORS:
                body = b""
            finally:
                response.release()
            _checked(response.status, body)
        return response


def decode_json(data: bytes | str) -> Any:
    """JSON text decoded once, by orjson (a watch line, a response body);
    what orjson refuses and `json` reads (NaN, integers past 64 bits, lone
    surrogates) as `json` reads it. ValueError when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def _checked(status: int, body: bytes) -> dict[str, Any]:
    """The decoded body of a 2xx answer; KubeStatusError otherwise."""
    try:
        decoded = decode_json(body) if body else {}
    except ValueError:
        decoded = body.decode(errors="replace")
    if status >= 300:
        raise KubeStatusError.from_status(status, decoded)
    if not isinstance(decoded, dict):
        raise KubeStatusError(status, "BadResponse", f"expected a JSON object, got {str(decoded)[:200]}")
    return decoded
