"""The nodes' kubelets as far as the API server sees them, for the benches and
test harnesses that run no node: a pod whose Binding was written is admitted
(`status.startTime`) and, when `running`, starts Running. The bridge waits for
that admission before it binds the next GPU pod of the same size to the node
(services/tidal_bridge/binds_in_flight.py), as it would on a real cluster.
The full kubelet stand-in, which admits by status.allocatable and gets devices
from the device plugin, is `kubelet.py`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .kube_api import KubeApiServer
from .kube_api.protocol import now_stamp


class AdmittingKubelets:
    def __init__(self, api: KubeApiServer, *, running: bool = True,
                 on_binding: Callable[[dict, str], None] | None = None) -> None:
        self.api, self.running, self.on_binding = api, running, on_binding
        self.admitted = 0
        self.changed = asyncio.Event()  # set on each admission
        self._bound: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        api.admit_binding = self._binding

    def _binding(self, pod: dict, node: str) -> None:
        # in the API server's handler, which writes the Binding before it next awaits: `run` sees it written
        if self.on_binding is not None:
            self.on_binding(pod, node)
        self._bound.put_nowait((pod["metadata"]["namespace"], pod["metadata"]["name"]))

    async def run(self) -> None:
        """Admit the bound pods, in the order their Bindings were written; until cancelled."""
        while True:
            namespace, name = await self._bound.get()
            if self.api.pod(namespace, name) is None:
                continue

            def admit(obj: dict) -> None:
                status = obj.setdefault("status", {})
                status.setdefault("startTime", now_stamp())
                if self.running:
                    status["phase"] = "Running"
            self.api.update_pod(namespace, name, admit)
            self.admitted += 1
            self.changed.set()
