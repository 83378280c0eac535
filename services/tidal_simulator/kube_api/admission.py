"""Mutating admission as kube-apiserver runs it: the registered
MutatingWebhookConfigurations called over HTTPS on the requests they match
(`webhook_configs.py` keeps them).

For each configuration in name order, each of its webhooks in order, whose
rules match the request (operation, API group, version, resource with its
subresource as `nodes/status`, `*/status` or `*/*`; scope) and whose
`objectSelector` matches the object's or the old object's labels: POST an
AdmissionReview v1 to `clientConfig.url` with `?timeout=<n>s`, the server
certificate verified against `caBundle` (the host name too). Then:

- `allowed: false` → refused with the response's status code (400 when
  below 400): `admission webhook "<name>" denied the request: <message>`;
- a `JSONPatch` → applied, and the next webhook sees the patched object;
- a failed call (refused connection, TLS failure, `timeoutSeconds` passed,
  a status other than 200, a response that is no AdmissionReview for this
  uid, a patch type other than JSONPatch) → `failurePolicy`: `Ignore` goes
  on unchanged, `Fail` (the v1 default) refuses with 500 `failed calling
  webhook`;
- a patch that does not apply → 500 whatever the policy, as the API server
  does (it is not a failure to call the webhook).

A `service` reference cannot be reached from the stand-in: such a webhook
counts as a failed call. `reinvocationPolicy` and dry runs are not modelled.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import ssl
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .json_patch import JsonPatchError, apply_json_patch

DEFAULT_TIMEOUT_S = 10


class ApiError(Exception):
    """A request the API server answers with an error Status: the HTTP
    code, the Status reason and message (raised by in-process writes)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class AdmissionRefused(ApiError):
    """Admission refused the request (a webhook denied it, or failed under `failurePolicy: Fail`)."""


class CallFailed(Exception):
    """The webhook could not be called, or answered nonsense (failurePolicy applies)."""


@dataclass(frozen=True)
class Attributes:
    """What admission is told of a request."""

    operation: str
    resource: str
    sub_resource: str
    name: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    username: str
    groups: tuple[str, ...] = ()
    group: str = ""
    version: str = "v1"
    kind: str = "Node"
    namespace: str = ""
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))


def _listed(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def rule_matches(rule: dict[str, Any], a: Attributes) -> bool:
    """One RuleWithOperations against the request."""
    named = False
    for text in rule.get("resources") or []:  # `res[/sub]`, either part `*`; `nodes` alone: no subresource
        res, _, sub = str(text).partition("/")
        named = named or (res in ("*", a.resource) and sub in ("*", a.sub_resource))
    scope = rule.get("scope", "*")
    scoped = scope == "*" or scope == ("Namespaced" if a.namespace else "Cluster")
    return (_listed(rule.get("operations"), a.operation) and _listed(rule.get("apiGroups"), a.group)
            and _listed(rule.get("apiVersions"), a.version) and named and scoped)


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist); empty matches all."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, op, values = term.get("key"), term.get("operator"), term.get("values") or []
        present = key in labels
        if not {"In": present and labels[key] in values, "NotIn": not present or labels[key] not in values,
                "Exists": present, "DoesNotExist": not present}.get(op, False):
            return False
    return True


def webhook_matches(webhook: dict[str, Any], a: Attributes) -> bool:
    if not any(rule_matches(rule, a) for rule in webhook.get("rules") or []):
        return False
    labels = [((o or {}).get("metadata") or {}).get("labels") or {} for o in (a.obj, a.old) if o is not None]
    return any(selector_matches(webhook.get("objectSelector"), each) for each in labels)


def review_of(a: Attributes, obj: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview v1 request the webhook is sent."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": a.uid, "kind": {"group": a.group, "version": a.version, "kind": a.kind},
        "resource": {"group": a.group, "version": a.version, "resource": a.resource},
        "subResource": a.sub_resource, "requestKind": {"group": a.group, "version": a.version, "kind": a.kind},
        "requestResource": {"group": a.group, "version": a.version, "resource": a.resource},
        "requestSubResource": a.sub_resource, "name": a.name, "namespace": a.namespace,
        "operation": a.operation, "userInfo": {"username": a.username, "groups": list(a.groups)},
        "object": obj, "oldObject": a.old, "dryRun": False,
        "options": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}}}


@functools.lru_cache(maxsize=64)
def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """Verifies the webhook's certificate against `caBundle` (base64 PEM), else the system's roots.
    One context per bundle, kept: the client pools its connections per context, so a new one per
    call meant a new TCP connection and TLS handshake for every status write (as kube-apiserver,
    the stand-in keeps its connections to a webhook)."""
    if not ca_bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode()
        return ssl.create_default_context(cadata=pem)
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
        raise CallFailed(f"caBundle is not a base64 PEM bundle: {exc}") from None


class AdmissionChain:
    """Calls webhooks; one HTTP client for the server's lifetime (`close()`)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self.calls: list[tuple[str, str]] = []  # (webhook, outcome), for tests

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def mutate(self, configurations: list[dict[str, Any]], a: Attributes) -> dict[str, Any]:
        """The object after every matching webhook; AdmissionRefused when refused."""
        obj = a.obj
        for config in sorted(configurations, key=lambda c: c["metadata"]["name"]):
            for webhook in config.get("webhooks") or []:
                if not webhook_matches(webhook, a):
                    continue
                name = webhook.get("name", "")
                try:
                    answer = await self._call(webhook, review_of(a, obj), a.uid)
                except CallFailed as exc:
                    self.calls.append((name, f"failed: {exc}"))
                    if webhook.get("failurePolicy", "Fail") == "Ignore":
                        continue
                    raise AdmissionRefused(500, "InternalError", f'Internal error occurred: failed calling '
                                           f'webhook "{name}": {exc}') from None
                obj = self._apply(name, answer, obj)
        return obj

    def _apply(self, name: str, answer: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
        if not answer.get("allowed"):
            result = answer.get("status") or {}
            code = result.get("code") if isinstance(result.get("code"), int) else 0
            self.calls.append((name, "denied"))
            message = result.get("message") or "without explanation"
            raise AdmissionRefused(max(code, 400), result.get("reason") or "BadRequest",
                                   f'admission webhook "{name}" denied the request: {message}')
        if not answer.get("patch"):
            self.calls.append((name, "allowed"))
            return obj
        try:
            ops = json.loads(base64.b64decode(answer["patch"], validate=True))
            patched = apply_json_patch(obj, ops)
        except (binascii.Error, ValueError, JsonPatchError) as exc:
            self.calls.append((name, f"bad patch: {exc}"))
            raise AdmissionRefused(500, "InternalError", f"Internal error occurred: the patch of admission "
                                   f'webhook "{name}" does not apply: {exc}') from None
        self.calls.append((name, "patched"))
        return patched

    async def _call(self, webhook: dict[str, Any], review: dict[str, Any], uid: str) -> dict[str, Any]:
        client = webhook.get("clientConfig") or {}
        if not client.get("url"):
            raise CallFailed("failed to call webhook: a service reference is not reachable from the stand-in")
        timeout = webhook.get("timeoutSeconds") or DEFAULT_TIMEOUT_S
        context = tls_context(client.get("caBundle"))
        if self._session is None:
            self._session = aiohttp.ClientSession()
        url = f"{client['url']}{'&' if '?' in client['url'] else '?'}timeout={timeout}s"
        try:
            async with self._session.post(url, json=review, ssl=context,
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                body = await response.read()
                if response.status != 200:
                    raise CallFailed(f"failed to call webhook: the server answered {response.status}: "
                                     f"{body[:200].decode(errors='replace')}")
        except (aiohttp.ClientError, asyncio.TimeoutError, ssl.SSLError, OSError) as exc:
            raise CallFailed(f'failed to call webhook: Post "{url}": {type(exc).__name__}: {exc}') from None
        try:
            doc = json.loads(body)
            answer = doc["response"]
            valid = doc.get("apiVersion") == "admission.k8s.io/v1" and doc.get("kind") == "AdmissionReview"
        except (ValueError, KeyError, TypeError, AttributeError):
            raise CallFailed("received invalid webhook response: not an AdmissionReview") from None
        if not valid or not isinstance(answer, dict) or answer.get("uid") != uid:
            raise CallFailed(f"received invalid webhook response: expected an AdmissionReview v1 for uid {uid}")
        if answer.get("patch") and answer.get("patchType") != "JSONPatch":
            raise CallFailed(f"received invalid webhook response: patchType {answer.get('patchType')!r}")
        return answer
