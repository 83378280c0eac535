"""A package's public entry points, imported on first use: tools on top of
a service (the simulator, benches) import `from tidal_placement import
decide`, never its modules, and importing the package stays cheap (no
service wiring is loaded for a policy function)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` serving `names` (public name -> "module" or
    "module:attribute", relative to `package`)."""
    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = names[name].partition(":")
        found = importlib.import_module(f"{package}.{module}")
        return getattr(found, attribute) if attribute else found
    return __getattr__
