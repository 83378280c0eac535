"""What `kubectl apply --server-side -f FILE` sends, object by object, for
the tests that follow docs/install.md on the stand-in API server (the real
kubectl needs discovery and OpenAPI documents of every built-in group,
which the stand-in does not serve): a PATCH to each object's URL with
`Content-Type: application/apply-patch+yaml`, `fieldManager=kubectl`,
`fieldValidation=Strict` and `force=false` (kubectl's defaults), the
namespace `default` for a namespaced object that names none. The URL comes
from the kind, as discovery maps it: the built-in kinds the stand-in
serves, pods and nodes, and the resources of the CRDs registered so far
(read from the server before each object, as kubectl's discovery would
see a CRD applied earlier in the same file once it is established)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tidal_simulator.kube_api.server_side_apply import APPLY, BUILTIN

KINDS = {kind: (group, version, plural, namespaced) for (group, version, plural), (kind, namespaced) in
         BUILTIN.items()}
KINDS |= {"Pod": ("", "v1", "pods", True), "Node": ("", "v1", "nodes", False),
          "CustomResourceDefinition": ("apiextensions.k8s.io", "v1", "customresourcedefinitions", False),
          "MutatingWebhookConfiguration": ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                                           False)}


class ApplyError(AssertionError):
    """An object the server refused: its kind, name, code and Status message."""


async def _custom_kinds(session: aiohttp.ClientSession, url: str) -> dict[str, tuple[str, str, str, bool]]:
    async with session.get(f"{url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions") as response:
        crds = (await response.json())["items"]
    return {c["spec"]["names"]["kind"]: (c["spec"]["group"], v["name"], c["spec"]["names"]["plural"],
                                         c["spec"]["scope"] == "Namespaced")
            for c in crds for v in c["spec"]["versions"] if v.get("served") and v.get("storage")}


def object_url(obj: dict[str, Any], kinds: dict[str, tuple[str, str, str, bool]]) -> str:
    """The path of `obj` on an API server (KeyError for a kind it does not know)."""
    group, version, plural, namespaced = kinds[obj["kind"]]
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    scope = f"/namespaces/{obj['metadata'].get('namespace') or 'default'}" if namespaced else ""
    return f"{base}{scope}/{plural}/{obj['metadata']['name']}"


async def apply_objects(url: str, objects: list[dict[str, Any]], *, manager: str = "kubectl",
                        force: bool = False) -> list[int]:
    """Apply each object in order; the status codes (201 created, 200
    applied to the live object). ApplyError on the first refusal."""
    codes = []
    async with aiohttp.ClientSession() as session:
        for obj in objects:
            kinds = KINDS | await _custom_kinds(session, url)
            params = {"fieldManager": manager, "fieldValidation": "Strict", "force": str(force).lower()}
            async with session.patch(url + object_url(obj, kinds), params=params, data=json.dumps(obj),
                                     headers={"Content-Type": APPLY}) as response:
                if response.status >= 300:
                    answer = await response.json()
                    raise ApplyError(f"{obj['kind']}/{obj['metadata']['name']}: {response.status} "
                                     f"{answer.get('message')}")
                codes.append(response.status)
    return codes


async def apply_file(url: str, path: Path, **options: Any) -> list[int]:
    """`kubectl apply --server-side -f path`: every document of the file, in its order."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return await apply_objects(url, [d for d in yaml.load_all(path.read_text(), Loader=loader) if d], **options)
