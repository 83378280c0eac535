"""`tidal config default|check` and `tidal run --config`: the round trip
default file -> check -> settings equal to the defaults, one changed field
per service changing exactly that field, the environment over the file,
refusals one line each without a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tidal_cli.config_cmd import configuration
from tidal_cli.main import main
from tidal_cli.services import SERVICES, load
from tidal_runtime.config_document import own_fields
from tidal_runtime.configuration import file_key, load_settings

# One setting per section, and a valid value other than its default.
CHANGED = {
    "common": ("drainTimeoutSeconds", "drain_timeout_s", 7.5),
    "topology": ("intervalSeconds", "interval_s", 3.0),
    "scoring": ("peakMinSamples", "peak_min_samples", 5),
    "placement": ("gpuStrategy", "gpu_strategy", "best-fit"),
    "oversell": ("maxFactor", "max_factor", 1.25),
    "remediation": ("coolDownSeconds", "cool_down_s", 12.0),
    "bridge": ("bindConcurrency", "bind_concurrency", 8),
    "webhook": ("maxAgeSeconds", "max_age_s", 120.0),
    "simulator": ("seed", "seed", 7),
}


@pytest.fixture(autouse=True)
def no_tidal_environment(monkeypatch):
    for name in list(os.environ):
        if name.upper().startswith("TIDAL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def default_file(tmp_path, capsys) -> Path:
    assert main(["config", "default"]) == 0
    path = tmp_path / "default.yaml"
    path.write_text(capsys.readouterr().out)
    return path


def changed(base: Path, tmp_path: Path, section: str, key: str, value) -> Path:
    document = yaml.safe_load(base.read_text())
    document[section][key] = value
    path = tmp_path / f"{section}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_the_default_file_is_complete_and_commented(default_file):
    text = default_file.read_text()
    document = yaml.safe_load(text)
    assert (document["apiVersion"], document["kind"]) == ("config.tidal.dev/v1alpha1", "TidalConfiguration")
    assert list(document)[2:] == ["common", *SERVICES]
    placement = load("placement").settings_class
    assert list(document["placement"]) == [file_key(name) for name in own_fields(placement)]
    assert len(document["placement"]) == 13  # every setting of its own, each once
    assert "busUrl" in document["common"] and "busUrl" not in document["placement"]
    assert "  # how long a waiting pod holds back its type\n  permitTimeoutSeconds: 30.0\n" in text


def test_the_default_file_passes_the_check(default_file, capsys):
    assert main(["config", "check", str(default_file)]) == 0
    assert capsys.readouterr().out == f"{default_file}: valid TidalConfiguration (config.tidal.dev/v1alpha1)\n"


@pytest.mark.parametrize("name", SERVICES)
def test_the_default_file_loads_as_the_defaults(default_file, name):
    cls = load(name).settings_class
    assert load_settings(cls, default_file).model_dump() == cls().model_dump()


@pytest.mark.parametrize("section", list(CHANGED))
def test_one_changed_field_changes_exactly_that_field(default_file, tmp_path, section):
    key, field, value = CHANGED[section]
    path = changed(default_file, tmp_path, section, key, value)
    assert main(["config", "check", str(path)]) == 0
    for name in SERVICES:
        cls = load(name).settings_class
        before, after = cls().model_dump(), load_settings(cls, path).model_dump()
        differ = {f for f in before if before[f] != after[f]}
        # a common setting changes in every service; a section's only in its own
        assert differ == ({field} if section in ("common", name) else set()), name
        if differ:
            assert after[field] == value


@pytest.mark.parametrize("section", [s for s in CHANGED if s != "common"])
def test_the_environment_overrides_the_file(default_file, tmp_path, monkeypatch, section):
    key, field, value = CHANGED[section]
    path = changed(default_file, tmp_path, section, key, value)
    cls = load(section).settings_class
    default = cls.model_fields[field].default
    monkeypatch.setenv(f"TIDAL_{section.upper()}_{field.upper()}", str(default))
    assert getattr(load_settings(cls, path), field) == default


def test_the_check_names_every_problem_one_line_each(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: config.tidal.dev/v1\nkind: TidalConfiguration\nplacment: {}\n"
                    "placement:\n  gpuStrategyy: fgd\n  permitTimeoutSeconds: -1\n"
                    "oversell:\n  hysteresis: 0.9\nbridge:\n  allClusters: true\n")
    assert main(["config", "check", str(path)]) == 1
    captured = capsys.readouterr()
    cluster = configuration().defaults()["common"]["cluster"]
    assert captured.out == ""
    assert captured.err.splitlines() == [f"tidal: {path}: {p}" for p in [
        "apiVersion: expected config.tidal.dev/v1alpha1, got 'config.tidal.dev/v1'",
        "placment: unknown key (did you mean placement?)",
        "placement.gpuStrategyy: unknown key (did you mean gpuStrategy?)",
        "placement.permitTimeoutSeconds: Input should be greater than 0",
        "oversell: hysteresis (0.9) must be below stop_threshold (0.85)",
        f"bridge: the bridge handles only its own cluster ({cluster!r}): leave clusters/all_clusters unset",
    ]]
    assert "Traceback" not in captured.err


def test_the_check_of_a_missing_or_non_yaml_file_is_one_line(tmp_path, capsys):
    assert main(["config", "check", str(tmp_path / "absent.yaml")]) == 2
    assert capsys.readouterr().err == f"tidal: {tmp_path / 'absent.yaml'}: No such file or directory\n"
    path = tmp_path / "broken.yaml"
    path.write_text("placement: [\n")
    assert main(["config", "check", str(path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tidal: {path}: not valid YAML")


def test_run_refuses_a_bad_file_before_starting(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: config.tidal.dev/v1alpha1\nkind: TidalConfiguration\n"
                    "placement:\n  gpuStrategyy: fgd\n")
    assert main(["run", "placement", "--config", str(path)]) == 2
    assert capsys.readouterr().err == \
        f"tidal: {path}: placement.gpuStrategyy: unknown key (did you mean gpuStrategy?)\n"


def test_run_names_the_key_of_a_bad_value_from_the_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: config.tidal.dev/v1alpha1\nkind: TidalConfiguration\n"
                    "scoring:\n  peakMinSamples: 0\n")
    monkeypatch.setenv("TIDAL_CONFIG", str(path))  # as the manifests give it
    assert main(["run", "scoring"]) == 2
    assert capsys.readouterr().err == f"tidal: {path}: scoring.peakMinSamples: Input should be greater than or " \
                                      "equal to 1\n"


def test_up_refuses_a_file_no_service_can_read(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\n")
    assert main(["up", "--config", str(path), "--data-dir", str(tmp_path / "stack")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tidal: {path}: apiVersion: expected config.tidal.dev/v1alpha1, got 'v1'")
    assert "TIDAL_CONFIG" not in os.environ
