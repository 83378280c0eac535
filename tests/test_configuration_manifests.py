"""The manifests configure every service with one TidalConfiguration: the
tidal-config ConfigMap, mounted read-only in each workload of every bundle
and named by TIDAL_CONFIG, holding a file the check accepts. Rendered with
tests/test_manifests.py's kustomize loader."""

from __future__ import annotations

import os
from pathlib import PurePosixPath

import pytest
import yaml

from test_manifests import BUNDLES, bundle, deployed_services, env_of, named, workload_for
from tidal_cli.config_cmd import configuration
from tidal_runtime.configuration import ENV_VAR, file_fields, parse_document

CONFIG_MAP, KEY = "tidal-config", "tidal.yaml"


@pytest.fixture(autouse=True)
def no_tidal_environment(monkeypatch):
    for name in list(os.environ):
        if name.upper().startswith("TIDAL_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("name", BUNDLES)
@pytest.mark.parametrize("service", deployed_services())
def test_each_workload_reads_the_configuration_config_map(name, service):
    objects = bundle(name)
    pod = workload_for(objects, service)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    path = PurePosixPath(env_of(container)[ENV_VAR]["value"])
    assert path.name == KEY
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    assert mount.get("readOnly") is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == CONFIG_MAP
    assert KEY in named(objects, "ConfigMap", CONFIG_MAP)["data"]


@pytest.mark.parametrize("name", BUNDLES)
def test_the_configuration_of_every_bundle_passes_the_check(name):
    text = named(bundle(name), "ConfigMap", CONFIG_MAP)["data"][KEY]
    assert configuration().problems(parse_document(text, f"{name}: {CONFIG_MAP}")) == []


def test_the_webhooks_cap_is_the_oversell_policys():
    document = yaml.safe_load(named(bundle("base"), "ConfigMap", CONFIG_MAP)["data"][KEY])
    assert document["webhook"]["maxFactor"] == document["oversell"]["maxFactor"]


def test_no_workload_sets_in_the_environment_what_the_file_holds():
    # one place for each setting: a variable would silently override the file's field
    document = yaml.safe_load(named(bundle("base"), "ConfigMap", CONFIG_MAP)["data"][KEY])
    for service in deployed_services():
        (container,) = workload_for(bundle("base"), service)["spec"]["template"]["spec"]["containers"]
        for section in ("common", service):
            for key in document.get(section) or {}:
                field = file_fields(configuration().sections[service])[key]
                assert f"TIDAL_{service.upper()}_{field.upper()}" not in env_of(container), (service, key)

