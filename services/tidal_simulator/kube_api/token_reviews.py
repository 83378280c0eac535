"""ServiceAccount tokens and TokenReview, as kube-apiserver has them:

    in process    api.mint_token(namespace, service_account, pod=…, audiences=…)   what the kubelet
                  asks TokenRequest for when it fills a projected serviceAccountToken volume
    POST          /apis/authentication.k8s.io/v1/tokenreviews

The review answers 201 with the TokenReview and its `status`, as the real
one: an unknown, expired or wrongly addressed token (no audience in common
with `spec.audiences`, which default to the API server's own) is
`authenticated: false` with an `error`; a token bound to a pod that is gone
(or was re-created: another uid) is no longer valid; a caller without a
bearer token is anonymous, which may not create reviews (403). An authenticated token
reviews as `system:serviceaccount:<ns>:<sa>` with the service account
groups, the common `audiences`, and in `extra` the pod's name and uid and,
since Kubernetes 1.30 (ServiceAccountTokenPodNodeInfo, KEP-4193), the
node's name and uid (`authentication.kubernetes.io/node-name`, …). A mixin
of `KubeApiServer`, whose pods and nodes it reads.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tidal_clock import Clock, wall_clock

from .protocol import status

API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
EXTRA = "authentication.kubernetes.io/"


@dataclass(frozen=True)
class MintedToken:
    namespace: str
    service_account: str
    audiences: tuple[str, ...]
    expires: float
    credential_id: str
    pod: tuple[str, str] | None = None  # (name, uid) the token is bound to
    node: tuple[str, str] | None = None  # (name, uid) of the pod's node when minted


class TokenReviews:
    objects: dict[str, dict[tuple[str, str], dict[str, Any]]]

    token_clock: Clock = staticmethod(wall_clock)  # type: ignore[assignment]  # tests set their own

    @property
    def minted_tokens(self) -> dict[str, MintedToken]:
        """Every token minted, by its text (made on first use: a mixin has no __init__ here)."""
        return self.__dict__.setdefault("_minted_tokens", {})

    def mint_token(self, namespace: str, service_account: str, *, pod: str | None = None,
                   audiences: tuple[str, ...] = (API_AUDIENCE,), expiration_s: int = 3600) -> str:
        """A token for the service account, bound to pod `namespace/pod` when
        given (which must exist; its node, when bound, is recorded as the
        API server does). As TokenRequest, a pod-bound token is only for
        the pod's own ServiceAccount (ValueError otherwise)."""
        bound_pod = bound_node = None
        if pod is not None:
            obj = self.objects["pods"][(namespace, pod)]
            runs_as = (obj.get("spec") or {}).get("serviceAccountName") or "default"
            if runs_as != service_account:
                raise ValueError(f'cannot bind token for serviceaccount "{service_account}" to pod running with '
                                 f'different serviceaccount name "{runs_as}"')
            bound_pod = (pod, obj["metadata"].get("uid", ""))
            node_name = (obj.get("spec") or {}).get("nodeName")
            if node_name:
                node = self.objects["nodes"].get(("", node_name)) or {"metadata": {}}
                bound_node = (node_name, node["metadata"].get("uid", ""))
        token = "sim." + secrets.token_urlsafe(32)
        self.minted_tokens[token] = MintedToken(namespace, service_account, tuple(audiences),
                                                self.token_clock() + expiration_s, str(uuid.uuid4()),
                                                bound_pod, bound_node)
        return token

    def add_token_review_routes(self, r: web.UrlDispatcher) -> None:
        r.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)

    def review_token(self, token: str, audiences: list[str]) -> dict[str, Any]:
        """The `status` of a TokenReview of `token` for `audiences`."""
        minted = self.minted_tokens.get(token)
        wanted = audiences or [API_AUDIENCE]
        if minted is None:
            return {"user": {}, "error": "[invalid bearer token, square/go-jose: compact JWS format must have "
                                         "three parts]"}
        common = [a for a in wanted if a in minted.audiences]
        if not common:
            return {"user": {}, "error": f"[invalid bearer token, token audiences {list(minted.audiences)} is "
                                         f"invalid for the target audiences {wanted}]"}
        if self.token_clock() >= minted.expires:
            return {"user": {}, "error": "[invalid bearer token, service account token has expired]"}
        extra: dict[str, list[str]] = {EXTRA + "credential-id": [f"JTI={minted.credential_id}"]}
        if minted.pod is not None:
            pod = self.objects["pods"].get((minted.namespace, minted.pod[0]))
            if pod is None or pod["metadata"].get("uid", "") != minted.pod[1]:
                return {"user": {}, "error": f'[invalid bearer token, pod "{minted.pod[0]}" not found or '
                                             "its uid changed]"}
            extra[EXTRA + "pod-name"], extra[EXTRA + "pod-uid"] = [minted.pod[0]], [minted.pod[1]]
        if minted.node is not None:
            extra[EXTRA + "node-name"], extra[EXTRA + "node-uid"] = [minted.node[0]], [minted.node[1]]
        return {"authenticated": True, "audiences": common,
                "user": {"username": f"system:serviceaccount:{minted.namespace}:{minted.service_account}",
                         "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{minted.namespace}/{minted.service_account}")),
                         "groups": ["system:serviceaccounts", f"system:serviceaccounts:{minted.namespace}",
                                    "system:authenticated"],
                         "extra": extra}}

    async def _token_review(self, request: web.Request) -> web.StreamResponse:
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():  # anonymous may not create tokenreviews
            return status(403, "Forbidden", 'tokenreviews.authentication.k8s.io is forbidden: User '
                          '"system:anonymous" cannot create resource "tokenreviews" in API group '
                          '"authentication.k8s.io" at the cluster scope')
        try:
            body = await request.json()
        except ValueError:
            return status(400, "BadRequest", "the request body is not JSON")
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict) or not spec.get("token"):
            return status(422, "Invalid", 'TokenReview.authentication.k8s.io "" is invalid: spec.token: '
                          "Required value")
        audiences = spec.get("audiences") or []
        return web.json_response({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
                                  "metadata": {"creationTimestamp": None}, "spec": spec,
                                  "status": self.review_token(str(spec["token"]), list(audiences))}, status=201)
