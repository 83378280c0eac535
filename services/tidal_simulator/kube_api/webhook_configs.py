"""`admissionregistration.k8s.io/v1` MutatingWebhookConfigurations, kept in
the shared store (so a watch and resourceVersions work as for pods):

    GET, POST  /apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations   list / watch, create
    GET, PUT, DELETE  …/mutatingwebhookconfigurations/{name}
    GET        /apis/admissionregistration.k8s.io/v1                                  discovery

Validated and defaulted as the API server does for v1 (422 Invalid with the
field errors): a webhook name of at least three DNS labels, exactly one of
`clientConfig.url` (https) and `clientConfig.service`, `sideEffects` None
or NoneOnDryRun, `admissionReviewVersions` naming v1, `failurePolicy`
Ignore or Fail (default Fail), `timeoutSeconds` 1-30 (default 10),
`matchPolicy` Exact or Equivalent (default Equivalent), and rule operations
among CREATE, UPDATE, DELETE, CONNECT and `*` (a PATCH reaches admission as
an UPDATE: there is no PATCH operation).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from aiohttp import web

from .protocol import Watcher, not_found, now_stamp, status, status_body
from .store import Store
from .watch import serve_watch

GROUP, VERSION, RESOURCE, KIND = ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                                  "MutatingWebhookConfiguration")
BASE = f"/apis/{GROUP}/{VERSION}/{RESOURCE}"
OPERATIONS = {"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}
DEFAULTS = {"failurePolicy": "Fail", "matchPolicy": "Equivalent", "timeoutSeconds": 10,
            "reinvocationPolicy": "Never", "namespaceSelector": {}, "objectSelector": {}}


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, what is wrong) for every invalid field of a configuration."""
    found = []
    if not (doc.get("metadata") or {}).get("name"):
        found.append(("metadata.name", "Required value"))
    webhooks = doc.get("webhooks") or []
    if not isinstance(webhooks, list):
        return [*found, ("webhooks", "must be a list")]
    for i, hook in enumerate(webhooks):
        at = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            found.append((at, "must be an object"))
            continue
        if len(str(hook.get("name", "")).split(".")) < 3:
            found.append((f"{at}.name", "should be a domain with at least three segments separated by dots"))
        client = hook.get("clientConfig") or {}
        if ("url" in client) == ("service" in client):
            found.append((f"{at}.clientConfig", "exactly one of url or service is required"))
        elif "url" in client and not str(client["url"]).startswith("https://"):
            found.append((f"{at}.clientConfig.url", "'https' is the only allowed URL scheme"))
        if hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            found.append((f"{at}.sideEffects", 'Unsupported value: supported values: "None", "NoneOnDryRun"'))
        if "v1" not in (hook.get("admissionReviewVersions") or []):
            found.append((f"{at}.admissionReviewVersions", "must include v1 (the version this server sends)"))
        checks = (("failurePolicy", ("Ignore", "Fail")), ("matchPolicy", ("Exact", "Equivalent")),
                  ("reinvocationPolicy", ("Never", "IfNeeded")))
        found += [(f"{at}.{key}", f"Unsupported value: {hook[key]!r}") for key, allowed in checks
                  if key in hook and hook[key] not in allowed]
        timeout = hook.get("timeoutSeconds", 10)
        if not isinstance(timeout, int) or not 1 <= timeout <= 30:
            found.append((f"{at}.timeoutSeconds", "the timeout value must be between 1 and 30 seconds"))
        for j, rule in enumerate(hook.get("rules") or []):
            bad = set(rule.get("operations") or []) - OPERATIONS
            if bad or not rule.get("operations"):
                found.append((f"{at}.rules[{j}].operations", f"Unsupported value: {sorted(bad)}; supported "
                              "values: CREATE, UPDATE, DELETE, CONNECT, *"))
            for key in ("apiGroups", "apiVersions", "resources"):
                if not rule.get(key):
                    found.append((f"{at}.rules[{j}].{key}", "Required value"))
    return found


class WebhookConfigurations:
    """The routes above; `create`, `delete` and `all` in process."""

    def __init__(self, store: Store, bookmark_interval_s: float | None = None) -> None:
        self.store = store
        self.bookmark_interval_s = bookmark_interval_s
        store.objects.setdefault(RESOURCE, {})
        store.kinds[RESOURCE] = (KIND, f"{GROUP}/{VERSION}")

    def add_routes(self, r: web.UrlDispatcher) -> None:
        r.add_get(f"/apis/{GROUP}/{VERSION}", self._discovery)
        r.add_get(BASE, self._list)
        r.add_post(BASE, self._create)
        r.add_get(BASE + "/{name}", self._get)
        r.add_put(BASE + "/{name}", self._replace)
        r.add_delete(BASE + "/{name}", self._delete)

    def all(self) -> list[dict[str, Any]]:
        return list(self.store.objects[RESOURCE].values())

    def create(self, doc: dict[str, Any], *, old: dict[str, Any] | None = None) -> dict[str, Any]:
        """Store a configuration (defaulted); ValueError listing the invalid fields."""
        wrong = problems(doc)
        if wrong:
            raise ValueError("; ".join(f"{f}: {m}" for f, m in wrong))
        doc = copy.deepcopy(doc)
        doc.update(apiVersion=f"{GROUP}/{VERSION}", kind=KIND)
        meta = doc["metadata"]
        meta.update(uid=(old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4()),
                    creationTimestamp=(old or {}).get("metadata", {}).get("creationTimestamp") or now_stamp())
        for hook in doc.setdefault("webhooks", []):
            for key, value in DEFAULTS.items():
                hook.setdefault(key, copy.deepcopy(value))
            for rule in hook.get("rules") or []:
                rule.setdefault("scope", "*")
        return self.store.write(RESOURCE, "MODIFIED" if old else "ADDED", doc)

    def delete(self, name: str) -> dict[str, Any] | None:
        found = self.store.objects[RESOURCE].get(("", name))
        return None if found is None else self.store.write(RESOURCE, "DELETED", copy.deepcopy(found))

    @staticmethod
    def _invalid(name: str, exc: ValueError) -> web.Response:
        body = status_body(422, "Invalid", f'{KIND}.{GROUP} "{name}" is invalid: {exc}', name=name,
                           group=GROUP, kind=KIND)
        return web.json_response(body, status=422)

    async def _discovery(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
                                  "resources": [{"name": RESOURCE, "singularName": KIND.lower(), "namespaced": False,
                                                 "kind": KIND, "verbs": ["create", "delete", "get", "list",
                                                                         "update", "watch"]}]})

    async def _list(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch", "").lower() in ("true", "1"):
            watcher = Watcher(RESOURCE, None, [], request.query.get("allowWatchBookmarks", "").lower() == "true")
            return await serve_watch(request, self.store, watcher, self.bookmark_interval_s)
        return web.json_response({"kind": f"{KIND}List", "apiVersion": f"{GROUP}/{VERSION}",
                                  "metadata": {"resourceVersion": str(self.store.rv)}, "items": self.all()})

    async def _create(self, request: web.Request) -> web.StreamResponse:
        doc = await request.json()
        name = (doc.get("metadata") or {}).get("name", "")
        if ("", name) in self.store.objects[RESOURCE]:
            return status(409, "AlreadyExists", f'{RESOURCE}.{GROUP} "{name}" already exists', name=name,
                          group=GROUP, kind=RESOURCE)
        try:
            return web.json_response(self.create(doc), status=201)
        except ValueError as exc:
            return self._invalid(name, exc)

    async def _get(self, request: web.Request) -> web.StreamResponse:
        found = self.store.objects[RESOURCE].get(("", request.match_info["name"]))
        return web.json_response(found) if found else not_found(RESOURCE, request.match_info["name"])

    async def _replace(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        old = self.store.objects[RESOURCE].get(("", name))
        if old is None:
            return not_found(RESOURCE, name)
        doc = await request.json()
        wanted = (doc.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            return status(409, "Conflict", f'Operation cannot be fulfilled on {RESOURCE}.{GROUP} "{name}": the '
                          "object has been modified; please apply your changes to the latest version and try again")
        doc.setdefault("metadata", {})["name"] = name
        try:
            return web.json_response(self.create(doc, old=old))
        except ValueError as exc:
            return self._invalid(name, exc)

    async def _delete(self, request: web.Request) -> web.StreamResponse:
        gone = self.delete(request.match_info["name"])
        return web.json_response(gone) if gone else not_found(RESOURCE, request.match_info["name"])
