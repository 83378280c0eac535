"""nats-py imports aiohttp, when it is installed, for a websocket transport
Tidal never uses (bus URLs are nats://, tls:// or kafka://): about 12 MiB
of memory in every service. Importing nats here first, with aiohttp hidden,
leaves it out. A process that imported aiohttp before (the bridge, for the
Kubernetes client) is unchanged, and aiohttp imports normally afterwards."""

import importlib
import sys

if "aiohttp" not in sys.modules and "nats" not in sys.modules:
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # `import aiohttp` raises ImportError
    try:
        importlib.import_module("nats.aio.transport")
    finally:
        del sys.modules["aiohttp"]
