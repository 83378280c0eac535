"""Layers only point down: libraries never import a service, no service
imports the CLI or the simulator (they sit on top)."""

from __future__ import annotations

import ast
import importlib
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
    # protoc's output is not ours to shape (the device plugin API's stubs)
    long = {str(p.relative_to(ROOT)): n for p in modules("libs") + modules("services")
            if not p.stem.endswith(("_pb2", "_pb2_grpc")) and (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_placement_service_is_wiring_only():
    lines = len((ROOT / "services" / "tidal_placement" / "service.py").read_text().splitlines())
    assert lines < 200, f"services/tidal_placement/service.py has {lines} lines: policy belongs beside it"


TOOLS = [p for p in modules("services/tidal_simulator") + sorted((ROOT / "bench").glob("*.py"))]


def imports_of_services(path: Path, own: str) -> list[tuple[str, list[str]]]:
    """(module, names) of every `from tidal_<service>… import …` of another service."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            if top in SERVICES and top != own:
                found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names
                      if alias.name.split(".")[0] in SERVICES and alias.name.split(".")[0] != own]
    return found


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_simulator_and_benches_use_only_public_entry_points(path):
    for module, names in imports_of_services(path, own="tidal_simulator"):
        assert "." not in module, f"{module}: import from the package ({module.split('.')[0]}), not its modules"
        public = set(importlib.import_module(module).PUBLIC)
        assert set(names) <= public, f"{module} does not export {sorted(set(names) - public)}"


@pytest.mark.parametrize("package", [s for s in SERVICES if hasattr(importlib.import_module(s), "PUBLIC")])
def test_no_entry_point_is_shadowed_by_a_module_of_its_name(package):
    # importing a submodule sets it as the package's attribute, hiding an export of that name
    front = importlib.import_module(package)
    for name, target in front.PUBLIC.items():
        module, _, attribute = target.partition(":")
        assert not attribute or not (ROOT / "services" / package / f"{name}.py").exists(), (package, name)


def test_the_entry_point_checker_sees_a_module_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from tidal_placement.decide import decide\n")
    assert imports_of_services(bad, own="tidal_simulator") == [("tidal_placement.decide", ["decide"])]
