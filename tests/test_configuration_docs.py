"""docs/configuration.md is generated from the settings classes: it fails
here when a setting, default or description changed and the file was not
regenerated (`tidal config reference`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidal_cli.config_cmd import reference_text
from tidal_cli.main import main
from tidal_cli.services import SERVICES, load
from tidal_runtime.config_document import own_fields
from tidal_runtime.configuration import file_key

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "configuration.md"


@pytest.fixture(autouse=True)
def no_tidal_environment(monkeypatch):
    for name in list(os.environ):
        if name.upper().startswith("TIDAL_"):
            monkeypatch.delenv(name)


def test_the_committed_reference_matches_the_models():
    assert REFERENCE.read_text() == reference_text(), \
        "docs/configuration.md drifted from the settings classes: run `tidal config reference`"


@pytest.mark.parametrize("name", SERVICES)
def test_the_reference_lists_every_setting_of_every_service(name):
    text = reference_text()
    cls = load(name).settings_class
    for field in own_fields(cls):
        assert f"| `{name}.{file_key(field)}` | `TIDAL_{name.upper()}_{field.upper()}` |" in text, field


def test_reference_check_passes_on_the_committed_file_and_fails_on_a_drifted_one(tmp_path, capsys):
    assert main(["config", "reference", "--check", "--out", str(REFERENCE)]) == 0
    drifted = tmp_path / "configuration.md"
    drifted.write_text(REFERENCE.read_text().replace("| `placement.gpuStrategy`", "| `placement.gpuStrat`"))
    capsys.readouterr()
    assert main(["config", "reference", "--check", "--out", str(drifted)]) == 1
    assert "drifted from the settings classes" in capsys.readouterr().err


def test_reference_writes_the_file(tmp_path):
    out = tmp_path / "configuration.md"
    assert main(["config", "reference", "--out", str(out)]) == 0
    assert out.read_text() == reference_text()
