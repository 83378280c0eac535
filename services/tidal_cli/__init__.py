"""The `tidal` command: one entry point over every service, the simulator and the tools."""

from tidal_runtime.exports import lazy_exports

# The public entry points (benches start a stack of real processes with it, and read its errors).
PUBLIC = {"Stack": "stack:Stack", "CliError": "errors:CliError"}
__all__ = sorted(PUBLIC)
__getattr__ = lazy_exports(__name__, PUBLIC)
