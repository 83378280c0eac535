"""The TidalConfiguration file as a service reads it (libs/tidal_runtime/
configuration.py): keys, precedence (keyword arguments > environment >
the service's section > common > defaults), and every refusal naming the
key's path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from tidal_cli.services import SERVICES, load
from tidal_placement.settings import PlacementSettings
from tidal_runtime.configuration import (API_VERSION, ENV_VAR, KIND, MAX_FILE_BYTES, SECTIONS, ConfigurationError,
                                         env_only, file_fields, file_key, load_settings, parse_document)
from tidal_runtime.settings import ServiceSettings
from tidal_scoring.settings import ScoringSettings
from tidal_topology.settings import TopologySettings

HEADER = f"apiVersion: {API_VERSION}\nkind: {KIND}\n"


@pytest.fixture(autouse=True)
def no_tidal_environment(monkeypatch):
    """Each test starts from the defaults: no TIDAL_ variable of the caller's shell leaks in."""
    for name in list(os.environ):
        if name.upper().startswith("TIDAL_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    path = tmp_path / "tidal.yaml"
    path.write_text(header + body)
    return path


def problems_of(path: Path, cls=PlacementSettings) -> list[str]:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(cls, path)
    assert caught.value.path == path
    return caught.value.problems


@pytest.mark.parametrize("field, key", [
    ("gpu_strategy", "gpuStrategy"),
    ("permit_timeout_s", "permitTimeoutSeconds"),     # _s: the unit spelled out
    ("bus_ack_wait_s", "busAckWaitSeconds"),
    ("output_window", "outputWindow"),
    ("kubeconfig", "kubeconfig"),
])
def test_file_keys_are_camel_case_with_seconds_spelled_out(field, key):
    assert file_key(field) == key


def test_without_a_file_the_settings_are_the_defaults():
    assert PlacementSettings().model_dump() == PlacementSettings.model_construct().model_dump()


def test_precedence_arguments_then_environment_then_section_then_common_then_default(tmp_path, monkeypatch):
    path = write(tmp_path, "common:\n  drainTimeoutSeconds: 5\n  logLevel: WARNING\n"
                           "placement:\n  logLevel: DEBUG\n  permitTimeoutSeconds: 3\n  bindTimeoutSeconds: 40\n")
    monkeypatch.setenv("TIDAL_PLACEMENT_PERMIT_TIMEOUT_S", "7")
    monkeypatch.setenv("TIDAL_PLACEMENT_BIND_TIMEOUT_S", "70")
    s = load_settings(PlacementSettings, path, bind_timeout_s=90)
    assert s.bind_timeout_s == 90            # keyword argument over environment over file
    assert s.permit_timeout_s == 7           # environment over the file
    assert s.log_level == "DEBUG"            # the service's section over common
    assert s.drain_timeout_s == 5            # common over the default
    assert s.retry_backoff_s == 1.0          # the default


def test_a_common_key_in_one_section_is_for_that_service_alone(tmp_path):
    path = write(tmp_path, "common:\n  logLevel: WARNING\nplacement:\n  logLevel: DEBUG\n")
    assert load_settings(PlacementSettings, path).log_level == "DEBUG"
    assert load_settings(ScoringSettings, path).log_level == "WARNING"


def test_an_unprefixed_shared_variable_overrides_the_file(tmp_path, monkeypatch):
    path = write(tmp_path, "common:\n  busUrl: nats://from-file:4222\n  cluster: east\n")
    monkeypatch.setenv("TIDAL_BUS_URL", "nats://from-env:4222")
    s = load_settings(ScoringSettings, path)
    assert (s.bus_url, s.cluster) == ("nats://from-env:4222", "east")


def test_tidal_config_names_the_file_for_a_plain_construction(tmp_path, monkeypatch):
    # what `tidal run SERVICE` in a container does: the manifests set TIDAL_CONFIG
    path = write(tmp_path, "scoring:\n  periodSeconds: 15\n")
    monkeypatch.setenv(ENV_VAR, str(path))
    assert ScoringSettings().period_s == 15
    assert PlacementSettings().permit_timeout_s == 30.0  # another section: untouched


def test_an_unknown_key_is_refused_with_its_path(tmp_path):
    path = write(tmp_path, "placement:\n  gpuStrategyy: fgd\n")
    assert problems_of(path) == ["placement.gpuStrategyy: unknown key (did you mean gpuStrategy?)"]
    assert str(ConfigurationError(path, problems_of(path))).startswith(f"{path}: placement.gpuStrategyy")


def test_a_snake_case_key_is_refused_with_its_file_spelling(tmp_path):
    path = write(tmp_path, "common:\n  drain_timeout_s: 3\n")
    assert problems_of(path) == ["common.drain_timeout_s: unknown key (did you mean drainTimeoutSeconds?)"]


def test_a_key_of_another_service_is_unknown_in_this_section(tmp_path):
    path = write(tmp_path, "placement:\n  peakEstimator: weighted\n")  # scoring's
    (problem,) = problems_of(path)
    assert problem.startswith("placement.peakEstimator: unknown key")


def test_every_unknown_key_is_named_one_line_each(tmp_path):
    path = write(tmp_path, "common:\n  nope: 1\nplacement:\n  alsoNope: 2\n  gpuStrategy: fgd\n")
    assert problems_of(path) == ["common.nope: unknown key", "placement.alsoNope: unknown key"]


@pytest.mark.parametrize("header, expected", [
    ("apiVersion: config.tidal.dev/v1\nkind: TidalConfiguration\n",
     "apiVersion: expected config.tidal.dev/v1alpha1, got 'config.tidal.dev/v1'"),
    (f"apiVersion: {API_VERSION}\nkind: KubeSchedulerConfiguration\n",
     "kind: expected TidalConfiguration, got 'KubeSchedulerConfiguration'"),
    (f"kind: {KIND}\n", "apiVersion: expected config.tidal.dev/v1alpha1, missing"),
])
def test_a_wrong_api_version_or_kind_is_refused(tmp_path, header, expected):
    assert problems_of(write(tmp_path, "placement: {}\n", header=header)) == [expected]


def test_a_section_naming_no_service_is_refused(tmp_path):
    path = write(tmp_path, "placment:\n  gpuStrategy: fgd\n")
    assert problems_of(path) == ["placment: unknown key (did you mean placement?)"]


def test_a_section_that_is_not_a_mapping_is_refused(tmp_path):
    assert problems_of(write(tmp_path, "placement: [1, 2]\n")) == ["placement: expected a mapping of settings, got list"]


def test_a_document_that_is_not_a_mapping_is_refused(tmp_path):
    assert problems_of(write(tmp_path, "", header="- just\n- a list\n")) == [
        f"expected a mapping with apiVersion: {API_VERSION} and kind: {KIND}"]


@pytest.mark.parametrize("body, key", [
    ("common:\n  httpFd: 3\n", "common.httpFd"),         # a socket inherited from the parent process
    ("topology:\n  nodeName: n1\n", "topology.nodeName"),  # the DaemonSet's spec.nodeName
    ("webhook:\n  httpsFd: 4\n", "webhook.httpsFd"),
])
def test_an_environment_only_setting_is_refused_in_the_file(tmp_path, body, key):
    section = key.split(".")[0]
    cls = load(section).settings_class if section != "common" else PlacementSettings
    assert problems_of(write(tmp_path, body), cls) == [f"{key}: set in the environment only, not in the file"]


def test_yaml_aliases_and_repeated_keys_are_refused(tmp_path):
    (problem,) = problems_of(write(tmp_path, "placement:\n  permitTimeoutSeconds: 3\n  permitTimeoutSeconds: 4\n"))
    assert problem.startswith("not valid YAML: repeated key 'permitTimeoutSeconds' (line 5")
    (problem,) = problems_of(write(tmp_path, "common: &c {logLevel: DEBUG}\nplacement: *c\n"))
    assert problem.startswith("not valid YAML: aliases (*name) are not accepted")


def test_an_oversized_or_missing_file_is_refused(tmp_path):
    big = write(tmp_path, "#" * (MAX_FILE_BYTES + 1) + "\n")
    assert problems_of(big) == [f"over {MAX_FILE_BYTES} bytes"]
    assert problems_of(tmp_path / "absent.yaml") == ["cannot be read: No such file or directory"]


def test_a_bad_value_from_the_file_names_its_key(tmp_path):
    path = write(tmp_path, "placement:\n  gpuStrategy: nope\ncommon:\n  httpPort: 70000\n")
    assert problems_of(path) == [
        "common.httpPort: Input should be less than or equal to 65535",
        "placement.gpuStrategy: unknown GPU strategy 'nope'; known: best-fit, fgd, fgd-cpu, joint"]


def test_a_bad_value_from_the_environment_stays_pydantics_error(tmp_path, monkeypatch):
    path = write(tmp_path, "placement:\n  gpuStrategy: nope\n")
    monkeypatch.setenv("TIDAL_PLACEMENT_GPU_STRATEGY", "also-nope")
    with pytest.raises(ValidationError, match="also-nope"):
        load_settings(PlacementSettings, path)


def test_a_value_overridden_by_the_environment_is_not_blamed_on_the_file(tmp_path, monkeypatch):
    path = write(tmp_path, "placement:\n  gpuStrategy: nope\n")
    monkeypatch.setenv("TIDAL_PLACEMENT_GPU_STRATEGY", "best-fit")
    assert load_settings(PlacementSettings, path).gpu_strategy == "best-fit"


def test_a_mapping_from_the_environment_is_merged_over_the_files(tmp_path, monkeypatch):
    from tidal_oversell.settings import OversellSettings

    path = write(tmp_path, "oversell:\n  poolPolicies: {gpu: none, cpu: factor}\n")
    monkeypatch.setenv("TIDAL_OVERSELL_POOL_POLICIES", '{"cpu": "bounded"}')
    assert load_settings(OversellSettings, path).pool_policies == {"gpu": "none", "cpu": "bounded"}


def test_the_services_sections_are_the_files_sections():
    classes = [load(name).settings_class for name in SERVICES]
    assert [c.config_section for c in classes] == list(SERVICES)  # each its own, named as `tidal run` names it
    assert list(SECTIONS) == list(SERVICES)
    assert ServiceSettings.config_section == "common"


@pytest.mark.parametrize("name", SERVICES)
def test_every_setting_says_what_it_means(name):
    cls = load(name).settings_class
    undescribed = [field for field, info in cls.model_fields.items() if not info.description]
    assert not undescribed, f"{cls.__name__}: give these a description: {undescribed}"


def test_the_node_name_still_comes_from_the_downward_api_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDAL_NODE_NAME", "node-7")
    s = load_settings(TopologySettings, write(tmp_path, "topology:\n  intervalSeconds: 2\n"))
    assert (s.node_name, s.interval_s) == ("node-7", 2)
    assert env_only(TopologySettings.model_fields["node_name"])


def test_parse_document_returns_the_checked_mapping():
    document = parse_document(HEADER + "placement:\n  gpuStrategy: fgd\n", "inline")
    assert document["placement"] == {"gpuStrategy": "fgd"}


@pytest.mark.parametrize("name", SERVICES)
def test_no_two_settings_share_a_file_key(name):
    cls = load(name).settings_class
    in_file = [field for field, info in cls.model_fields.items() if not env_only(info)]
    assert sorted(file_fields(cls).values()) == sorted(in_file)
