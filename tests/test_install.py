"""The rendered install files, k8s/install/<bus>.yaml: each is the render of
its overlay (`make manifests`; a change under k8s/ without it fails here),
valid for the oldest Kubernetes the manifests support, in an order
`kubectl apply --server-side -f` can create, and applied to the stand-in
API server cleanly, twice."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import patience
from kube_apply import apply_file
from test_manifests import K8S_VERSION
from tidal_cli import manifests
from tidal_simulator.kube_api import KubeApiServer

INSTALL = manifests.INSTALL
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
FILES = sorted(manifests.OVERLAYS)


def documents(name: str) -> list[dict]:
    return [d for d in yaml.load_all((INSTALL / name).read_text(), Loader=LOADER) if d]


@pytest.mark.parametrize("name", FILES)
def test_the_install_file_is_the_render_of_its_overlay(name):
    overlay = manifests.OVERLAYS[name]
    assert (INSTALL / name).read_text() == manifests.render(overlay), (
        f"k8s/install/{name} differs from the render of k8s/{overlay}: run `make manifests`")


@pytest.mark.parametrize("name", FILES)
def test_the_install_file_holds_every_object_of_its_overlay_valid(name):
    objects = documents(name)
    key = manifests.legacy_order
    assert sorted(objects, key=key) == sorted(manifests.build(manifests.K8S / manifests.OVERLAYS[name]), key=key)
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", FILES)
def test_what_an_object_needs_comes_before_it(name):
    kinds = [o["kind"] for o in documents(name)]
    assert kinds[0] == "Namespace"
    last_crd = max(i for i, k in enumerate(kinds) if k == "CustomResourceDefinition")
    assert last_crd < min(i for i, k in enumerate(kinds) if k not in ("Namespace", "CustomResourceDefinition"))
    assert kinds.index("ServiceAccount") < min(kinds.index(k) for k in ("Deployment", "DaemonSet", "StatefulSet"))
    assert kinds.index("ConfigMap") < kinds.index("Deployment")


@pytest.mark.parametrize("name", FILES)
def test_the_order_is_kubectl_kustomizes_where_kubectl_is_installed(name):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is missing: Debian's kubernetes-client provides it (`make test` installs it)")
    overlay = manifests.K8S / manifests.OVERLAYS[name]
    done = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True,
                          timeout=patience(60))
    assert done.returncode == 0, done.stderr

    def ids(objects: list[dict]) -> list[tuple]:
        return [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert ids(documents(name)) == ids(d for d in yaml.load_all(done.stdout, Loader=LOADER) if d)


def test_check_names_a_stale_file_and_the_render_rewrites_it(tmp_path: Path, capsys):
    assert manifests.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == FILES
    (tmp_path / "kafka.yaml").write_text((tmp_path / "kafka.yaml").read_text().replace("replicas: 3", "replicas: 2"))
    (tmp_path / "nats.yaml").unlink()
    assert manifests.main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "nats.yaml: differs from its render" in err and "kafka.yaml: differs from its render" in err


@pytest.mark.parametrize("name", FILES)
async def test_the_install_file_applies_server_side_to_an_empty_stand_in_twice(name):
    async with KubeApiServer() as api:
        first = await apply_file(api.url, INSTALL / name)
        assert set(first) == {201}, first
        written = api.rv
        assert set(await apply_file(api.url, INSTALL / name)) == {200}  # the same file again: nothing changes
        assert api.rv == written
        assert {crd.kind for crd in api.custom.crds.values()} == {"Tenant", "FairShare"}
        assert len(api.objects["deployments.apps"]) == sum(o["kind"] == "Deployment" for o in documents(name))


def obj(kind: str, name: str = "x", api_version: str = "v1") -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}


def test_the_legacy_order_is_kustomizes():
    # the listed kinds first in kustomize's order, then the others by group_version_kind, webhooks last
    shuffled = [obj("MutatingWebhookConfiguration", api_version="admissionregistration.k8s.io/v1"),
                obj("NetworkPolicy", api_version="networking.k8s.io/v1"),
                obj("DaemonSet", api_version="apps/v1"), obj("Deployment", "b", "apps/v1"),
                obj("Deployment", "a", "apps/v1"), obj("ConfigMap"),
                obj("CustomResourceDefinition", api_version="apiextensions.k8s.io/v1"), obj("Namespace")]
    assert [(o["kind"], o["metadata"]["name"]) for o in sorted(shuffled, key=manifests.legacy_order)] == [
        ("Namespace", "x"), ("CustomResourceDefinition", "x"), ("ConfigMap", "x"), ("Deployment", "a"),
        ("Deployment", "b"), ("DaemonSet", "x"), ("NetworkPolicy", "x"), ("MutatingWebhookConfiguration", "x")]


def test_a_kustomization_the_loader_cannot_build_is_refused(tmp_path: Path):
    (tmp_path / "kustomization.yaml").write_text("resources: [missing.yaml]\n")
    with pytest.raises(manifests.ManifestError, match="missing resource"):
        manifests.build(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml, a.yaml]\n")
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")
    with pytest.raises(manifests.ManifestError, match="defined twice"):
        manifests.build(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml]\npatches: [{path: p.yaml}]\n")
    (tmp_path / "p.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {a: b}\n")
    with pytest.raises(manifests.ManifestError, match="found 0 times"):
        manifests.build(tmp_path)


def test_a_file_in_a_config_map_is_rendered_as_a_block():
    (config,) = [o for o in documents("nats.yaml") if o["metadata"]["name"] == "tidal-nats-config"]
    assert "\n  server.conf: |\n" in (INSTALL / "nats.yaml").read_text()
    assert config["data"]["server.conf"].count("\n") > 10
