"""What the simulated kubelets did, kept for the run's audit
(`tidal_audit.at_the_node`) and the report: the devices each container was
handed, and the pods they rejected."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Handed:
    """What one container of a pod was handed by a device plugin."""

    pod: str
    uid: str
    node: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    envs: dict[str, str]
    cdi_devices: tuple[str, ...]
    devices: tuple[str, ...]
    gpus: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Rejected:
    """A pod its kubelet rejected: kube's reason and the message it set on the pod."""

    pod: str
    uid: str
    node: str
    reason: str
    message: str
    t_s: float
