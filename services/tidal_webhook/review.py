"""AdmissionReview `admission.k8s.io/v1`: the request the API server sends,
the response it expects back (pure).

A response carries the request's `uid`, `allowed`, and for a change a
base64 `JSONPatch`. The webhook never refuses: every answer allows the
request, changed or not, and says why in `status.message` (the API server
does not read `status` when `allowed` is true; it is there for operators
reading the webhook's log or a captured review). A body that is not an
AdmissionReview v1 is answered HTTP 400 with such a response, uid as far
as it could be read; the API server counts it a failed call and, with
`failurePolicy: Ignore`, lets the update through unchanged.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_BODY = 3 * 1024 * 1024  # the API server's request limit; a node object is a few KiB


class ReviewError(ValueError):
    """The body is not an AdmissionReview v1 request; `uid` when one was read."""

    def __init__(self, message: str, uid: str = "") -> None:
        super().__init__(message)
        self.uid = uid


@dataclass(frozen=True)
class Review:
    """The fields of an AdmissionRequest the webhook looks at."""

    uid: str
    operation: str
    group: str
    resource: str
    sub_resource: str
    name: str
    username: str
    obj: dict[str, Any]
    old: dict[str, Any] | None

    @property
    def node_status_update(self) -> bool:
        return (self.group, self.resource, self.sub_resource, self.operation) == ("", "nodes", "status", "UPDATE")


def read_review(body: bytes) -> Review:
    """The AdmissionRequest in `body`; ReviewError saying what is wrong."""
    if len(body) > MAX_BODY:
        raise ReviewError(f"body of {len(body)} bytes is over {MAX_BODY}")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReviewError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReviewError("not a JSON object")
    request = doc.get("request")
    uid = request.get("uid") if isinstance(request, dict) and isinstance(request.get("uid"), str) else ""
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise ReviewError(f"expected {API_VERSION} {KIND}, got {doc.get('apiVersion')!r} {doc.get('kind')!r}", uid)
    if not isinstance(request, dict) or not uid:
        raise ReviewError("no request, or a request without a uid", uid)
    resource, user, obj, old = (request.get(k) for k in ("resource", "userInfo", "object", "oldObject"))
    if not isinstance(resource, dict) or not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        raise ReviewError("request.resource and request.object (with metadata) are required", uid)
    if old is not None and not isinstance(old, dict):
        raise ReviewError("request.oldObject is not an object", uid)
    texts = {k: request.get(k, "") for k in ("operation", "subResource", "name")}
    if not all(isinstance(v, str) for v in texts.values()):
        raise ReviewError("request.operation, subResource and name must be strings", uid)
    username = user.get("username", "") if isinstance(user, dict) else ""
    return Review(uid=uid, operation=texts["operation"], group=str(resource.get("group", "")),
                  resource=str(resource.get("resource", "")), sub_resource=texts["subResource"],
                  name=texts["name"] or str(obj["metadata"].get("name", "")),
                  username=username if isinstance(username, str) else "", obj=obj, old=old)


def response(uid: str, reason: str, ops: list[dict[str, Any]] | None = None, code: int = 200) -> dict[str, Any]:
    """An AdmissionReview allowing the request, with `ops` as its JSON patch when there are any."""
    answer: dict[str, Any] = {"uid": uid, "allowed": True, "status": {"code": code, "message": reason}}
    if ops:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(json.dumps(ops, separators=(",", ":")).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": KIND, "response": answer}
