"""Who may have a node agent's NATS credentials, decided from a Kubernetes
TokenReview: pure functions, the issuing service (`tidal_credentials`) is
their HTTP adapter.

A node agent proves which node it runs on with its projected ServiceAccount
token (audience `tidal-bus`). The issuer asks the API server to review it
(`POST /apis/authentication.k8s.io/v1/tokenreviews`, `spec.audiences`) and
grants node N's permissions only when the review says

    status.authenticated                                   true
    status.audiences                                       contains the audience asked
    status.user.username                                   system:serviceaccount:<ns>:<sa>, the agent's
    status.user.extra["authentication.kubernetes.io/node-name"]   [N]

The node name is in the token because the kubelet asked for it bound to the
agent's pod, and the API server (1.30+, ServiceAccountTokenPodNodeInfo)
records the pod's node in it; a token of a deleted pod no longer reviews as
authenticated. The user JWT then carries exactly what `tidal nats-config`
grants `topology-N` (nats_permissions) and an expiry, and is issued for the
public key the agent sent: its seed never leaves the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from . import nats_jwt
from .nats_permissions import service_permissions, topology_user

NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
DEFAULT_AUDIENCE = "tidal-bus"
# The node agents' namespace (Pod Security `privileged`, apart from the control
# plane's tidal-system: k8s/base/node/) and the ServiceAccount the issuer accepts.
AGENT_NAMESPACE = "tidal-node"
DEFAULT_AGENT_SERVICE_ACCOUNT = f"{AGENT_NAMESPACE}:tidal-topology"
_USER_KEY = re.compile(r"^U[A-Z2-7]{55}$")  # an nkey user public key
_NODE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")  # a Kubernetes node name


@dataclass(frozen=True)
class Verdict:
    """What the issuer answers: `code` 200 with the node, or the HTTP code
    of a refusal (400 a malformed request, 401 not authenticated, 403 not
    a node agent of one node, 503 the review could not be had) and why."""

    code: int
    reason: str
    node: str | None = None
    pod: str | None = None

    @property
    def granted(self) -> bool:
        return self.code == 200


def service_account_user(namespace: str, name: str) -> str:
    """The user name a ServiceAccount's tokens review as."""
    return f"system:serviceaccount:{namespace}:{name}"


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer …` header, None without one."""
    scheme, _, token = (header or "").strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def check_request(token: str | None, public_key: object) -> Verdict | None:
    """A refusal of a request that cannot be reviewed (no token: 401; a
    public key that is not an nkey user key: 400), else None."""
    if not token:
        return Verdict(401, "no ServiceAccount token (Authorization: Bearer <projected token>)")
    if not isinstance(public_key, str) or not _USER_KEY.match(public_key):
        return Verdict(400, "publicKey: not an nkey user public key (56 characters starting with U)")
    return None


def token_review(token: str, audience: str) -> dict[str, Any]:
    """The TokenReview to create for `token`, asking for `audience`."""
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]}}


def judge(review: dict[str, Any], *, service_account: str, audience: str) -> Verdict:
    """Whether the reviewed token is the node agent's, bound to one node:
    401 when not authenticated (or not for `audience`), 403 when it is
    another identity or carries no single node name; else 200 with it."""
    status = review.get("status") if isinstance(review, dict) else None
    if not isinstance(status, dict) or status.get("authenticated") is not True:
        error = str((status or {}).get("error") or "the API server did not authenticate it")[:200]
        return Verdict(401, f"token not authenticated: {error}")
    audiences = status.get("audiences")
    if audiences is not None and audience not in audiences:
        return Verdict(401, f"token not meant for audience {audience!r}")
    user = status.get("user") if isinstance(status.get("user"), dict) else {}
    username = str(user.get("username") or "")
    if username != service_account:
        return Verdict(403, f"{username or 'an unnamed user'} is not the node agent's ServiceAccount "
                            f"({service_account})")
    extra = user.get("extra") if isinstance(user.get("extra"), dict) else {}
    nodes = extra.get(NODE_NAME_KEY) or []
    if not isinstance(nodes, list) or len(nodes) != 1 or not _NODE.match(str(nodes[0])):
        return Verdict(403, f"the token is bound to no node ({NODE_NAME_KEY} missing: a pod-bound projected "
                            "token on Kubernetes 1.30 or later carries it)")
    pods = extra.get(POD_NAME_KEY) or []
    return Verdict(200, "ok", node=str(nodes[0]), pod=str(pods[0]) if isinstance(pods, list) and pods else None)


def expiry(now: float, ttl_s: int) -> int:
    """When credentials issued at `now` stop working: `ttl_s` later, whole seconds."""
    return int(now) + int(ttl_s)


def node_user_jwt(signing_seed: str, account: str, public_key: str, node: str, *, namespace: str, cluster: str,
                  iat: int, exp: int) -> str:
    """Node `node`'s user JWT for `public_key`: named `topology-<node>`,
    exactly that node's publish and subscribe subjects, valid until `exp`,
    signed by the account signing key on behalf of `account`."""
    granted = service_permissions("topology", namespace=namespace, cluster=cluster, node=node)
    claims = nats_jwt.user_claims(public_key, name=topology_user(node), iat=iat, exp=exp,
                                  publish=granted.publish, subscribe=granted.subscribe, issuer_account=account)
    return nats_jwt.encode(claims, signing_seed, "account")


def renew_at(iat: float, exp: float, fraction: float = 2 / 3) -> float:
    """When credentials valid from `iat` to `exp` are renewed: after
    `fraction` of their life, so a renewal that fails has the last third
    to be retried in before the server closes the connection."""
    return iat + (exp - iat) * fraction
