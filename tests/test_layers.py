"""Layers only point down: libraries never import a service, no service
imports the CLI or the simulator (they sit on top)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists())
TOP = {"tidal_cli", "tidal_simulator"}  # apps over the services: nothing below imports them


def imported(path: Path) -> set[str]:
    """Top-level package names a module imports (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_the_checker_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from tidal_placement.service import PlacementService\nimport tidal_cli.main\n")
    assert imported(bad) == {"tidal_placement", "tidal_cli"}


@pytest.mark.parametrize("path", modules("libs"), ids=lambda p: str(p.relative_to(ROOT)))
def test_libraries_import_no_service(path):
    assert not imported(path) & set(SERVICES)


@pytest.mark.parametrize("path", [p for p in modules("services") if p.relative_to(ROOT / "services").parts[0]
                                  not in TOP], ids=lambda p: str(p.relative_to(ROOT)))
def test_services_import_neither_the_cli_nor_the_simulator(path):
    assert not imported(path) & TOP



MAX_LINES = 300  # a module longer than this is doing more than one thing


def test_no_module_exceeds_the_size_limit():
    long = {str(p.relative_to(ROOT)): n for p in modules("libs") + modules("services")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_placement_service_is_wiring_only():
    lines = len((ROOT / "services" / "tidal_placement" / "service.py").read_text().splitlines())
    assert lines < 200, f"services/tidal_placement/service.py has {lines} lines: policy belongs beside it"
