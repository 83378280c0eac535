"""The rendered install manifests: `k8s/install/<bus>.yaml`, one file per
overlay (as Kueue ships `manifests.yaml`), built from the kustomizations in
k8s/ without the kustomize binary.

    python -m tidal_cli.manifests            # (re)write k8s/install/*.yaml (`make manifests`)
    python -m tidal_cli.manifests --check    # exit 1 naming each file that differs from its render

The loader builds a kustomization the way kustomize would for the features
these manifests use: resources, nested bases, `namespace:`, a
NamespaceTransformer with `unsetOnly: true` (the namespace of every object
that names none yet: the node agent keeps its own), and strategic-merge
patches of ConfigMap data and of workloads' pod templates, lists merged by
their Kubernetes merge keys, each patch on the object it names or on every
object its `target` (kind, name, namespace) selects. It refuses anything else
(NotImplementedError), so a kustomization that starts using another
feature fails instead of being rendered wrongly. The objects come out in
kustomize's `legacy` order (namespace and CRDs first, webhook
configurations last) with sorted keys, as `kubectl kustomize` prints them,
so `kubectl apply --server-side -f` creates each object after what it needs.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
INSTALL = K8S / "install"
# install file -> the kustomization it renders
OVERLAYS = {"nats.yaml": "overlays/nats", "kafka.yaml": "overlays/kafka"}
HEADER = ("# Rendered from k8s/{overlay} by `make manifests` (python -m tidal_cli.manifests): do not edit.\n"
          "# kubectl apply --server-side -f k8s/install/{name}   (docs/install.md)\n")

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass",
                  "CustomResourceDefinition", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
SUPPORTED_KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "resources", "patches", "transformers"}
# The selector keys of a patch `target` the loader matches (kustomize has more: refused).
TARGET_KEYS = {"kind", "name", "namespace"}
# Strategic-merge keys of the pod-template lists patched here (as in the
# Kubernetes API's patchMergeKey); any other list is replaced whole.
MERGE_KEYS = {"containers": "name", "env": "name", "volumes": "name", "volumeMounts": "mountPath"}
PATCHABLE_WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet"}
# kustomize's legacy order (api/resid/gvk.go): these first, in this order, then
# every other kind by group_version_kind, then these last.
ORDER_FIRST = ("Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
               "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap",
               "Secret", "Endpoints", "Service", "LimitRange", "PriorityClass", "PersistentVolume",
               "PersistentVolumeClaim", "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget")
ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# libyaml's safe loader and dumper where PyYAML has them: ten times faster, the same documents
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class ManifestError(ValueError):
    """A kustomization the loader cannot build as kustomize would (a missing
    file, a patch without its target, an object defined twice)."""


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of one file, each a Kubernetes object."""
    with path.open() as f:
        docs = [d for d in yaml.load_all(f, Loader=_LOADER) if d is not None]
    for doc in docs:
        if not (isinstance(doc, dict) and "kind" in doc):
            raise ManifestError(f"{path}: not a Kubernetes object: {doc!r}")
    return docs


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Strategic merge of `patch` into `target`, in place: maps key by key,
    the `MERGE_KEYS` lists item by item (new items first, as kustomize puts
    them), every other value replaced."""
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(target.get(key), list):
            by_key = {item[MERGE_KEYS[key]]: item for item in target[key]}
            added = []
            for item in value:
                if item[MERGE_KEYS[key]] in by_key:
                    merge(by_key[item[MERGE_KEYS[key]]], item)
                else:
                    added.append(copy.deepcopy(item))
            target[key][:0] = added
        else:
            target[key] = copy.deepcopy(value)


def _selected(objects: list[dict[str, Any]], selector: dict[str, str]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == selector["kind"] and o["metadata"]["name"] == selector["name"]
            and selector.get("namespace", o["metadata"].get("namespace")) == o["metadata"].get("namespace")]


def _targets(objects: list[dict[str, Any]], patch: dict[str, Any], target: dict[str, str] | None,
             origin: Path) -> list[dict[str, Any]]:
    """The objects a patch applies to: every one its `target` selects (at least
    one), else the one object of its kind, name (and namespace, when it names one)."""
    if target is not None:
        if set(target) - TARGET_KEYS or not {"kind", "name"} <= set(target) or target["kind"] != patch.get("kind"):
            raise NotImplementedError(f"{origin}: a patch target selects by {sorted(TARGET_KEYS)} only, "
                                      "its kind the patch's")
        found = _selected(objects, target)
        if not found:
            raise ManifestError(f"{origin}: patch target {target} selects nothing")
        return found
    found = _selected(objects, {"kind": patch.get("kind"), **patch.get("metadata", {})})
    if len(found) != 1:
        raise ManifestError(f"{origin}: patch target {patch.get('kind')} {patch['metadata']['name']!r} found "
                            f"{len(found)} times")
    return found


def apply_patch(objects: list[dict[str, Any]], patch: dict[str, Any], origin: Path,
                target: dict[str, str] | None = None) -> None:
    """Strategic-merge patch of a ConfigMap's data or of a workload's pod template."""
    if patch.get("kind") in PATCHABLE_WORKLOADS and set(patch) <= {"apiVersion", "kind", "metadata", "spec"} \
            and set(patch.get("spec", {})) <= {"template"}:
        for obj in _targets(objects, patch, target, origin):
            merge(obj["spec"], patch.get("spec", {}))
        return
    if patch.get("kind") != "ConfigMap" or set(patch) - {"apiVersion", "kind", "metadata", "data"}:
        raise NotImplementedError(f"{origin}: the loader only patches ConfigMap data and pod templates")
    for obj in _targets(objects, patch, target, origin):
        data = obj.setdefault("data", {})
        for key, value in (patch.get("data") or {}).items():
            if value is None:  # strategic merge: null deletes the key
                data.pop(key, None)
            else:
                data[key] = value


def unset_namespace(directory: Path, entry: Any) -> str:
    """The namespace of a `transformers:` file: one NamespaceTransformer with
    `unsetOnly: true` (it leaves an object's own namespace, and every
    binding's subjects, as they are), the only transformer the loader runs."""
    if not isinstance(entry, str) or not (directory / entry).is_file():
        raise NotImplementedError(f"{directory}: a transformer must be a file here")
    docs = load_documents(directory / entry)
    if len(docs) != 1 or docs[0].get("kind") != "NamespaceTransformer" or docs[0].get("unsetOnly") is not True \
            or set(docs[0]) != {"apiVersion", "kind", "metadata", "unsetOnly"} or "namespace" not in docs[0]["metadata"]:
        raise NotImplementedError(f"{directory / entry}: only a NamespaceTransformer with unsetOnly: true is supported")
    return docs[0]["metadata"]["namespace"]


def build(directory: Path) -> list[dict[str, Any]]:
    """The objects `kustomize build directory` emits (for our subset), in the
    order the resources list them."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - SUPPORTED_KUSTOMIZATION_KEYS
    if unsupported:
        raise NotImplementedError(f"{directory}: the loader does not support {sorted(unsupported)}")

    objects: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        path = (directory / resource).resolve()
        if not path.exists():
            raise ManifestError(f"{directory}: missing resource {resource}")
        objects += build(path) if path.is_dir() else load_documents(path)

    for entry in kustomization.get("patches", []):
        if not isinstance(entry, dict) or "path" not in entry or set(entry) - {"path", "target"}:
            raise NotImplementedError(f"{directory}: only file patches (`- path: FILE`, a `target` or not) "
                                      "are supported")
        patch_file = directory / entry["path"]
        for patch in load_documents(patch_file):
            apply_patch(objects, patch, patch_file, entry.get("target"))

    namespace = kustomization.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace
            if obj["kind"] in {"RoleBinding", "ClusterRoleBinding"}:
                for subject in obj.get("subjects", []):
                    if subject.get("kind") == "ServiceAccount":
                        subject["namespace"] = namespace
    for entry in kustomization.get("transformers", []):
        namespace = unset_namespace(directory, entry)
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"].setdefault("namespace", namespace)

    ids = [(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise ManifestError(f"{directory}: objects defined twice: {sorted(duplicates, key=str)}")
    return objects


def legacy_order(obj: dict[str, Any]) -> tuple:
    """kustomize's legacy sort key: kind rank, then group_version_kind, namespace, name."""
    kind, (group, _, version) = obj["kind"], obj["apiVersion"].rpartition("/")
    rank = ORDER_FIRST.index(kind) if kind in ORDER_FIRST else \
        len(ORDER_FIRST) + 1 + ORDER_LAST.index(kind) if kind in ORDER_LAST else len(ORDER_FIRST)
    return rank, f"{group or '~G'}_{version}_{kind}", obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


class _Dumper(_DUMPER):  # type: ignore[misc, valid-type]
    """Block style for multi-line strings (as kustomize prints a ConfigMap's files)."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def render(overlay: str) -> str:
    """The install file of one kustomization under k8s/: a header, then every
    object as a YAML document in kustomize's order."""
    objects = sorted(build(K8S / overlay), key=legacy_order)
    body = "---\n".join(yaml.dump(o, Dumper=_Dumper, sort_keys=True, width=1 << 16) for o in objects)
    return HEADER.format(overlay=overlay, name=f"{Path(overlay).name}.yaml") + body


def stale(directory: Path = INSTALL) -> list[str]:
    """The install files in `directory` that differ from their render (or are missing)."""
    return [name for name, overlay in OVERLAYS.items()
            if not (directory / name).exists() or (directory / name).read_text() != render(overlay)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidal_cli.manifests", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which files differ from their render")
    parser.add_argument("--out", type=Path, default=INSTALL, help="directory of the install files (k8s/install)")
    args = parser.parse_args(argv)
    if args.check:
        differ = stale(args.out)
        for name in differ:
            print(f"{args.out / name}: differs from its render: run `make manifests`", file=sys.stderr)
        return 1 if differ else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, overlay in OVERLAYS.items():
        (args.out / name).write_text(render(overlay))
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
