"""`tidal explain` from the pod itself, as `kubectl describe pod` reads it:
the pod from the API server (the bridge's client, `tidal_bridge.kube`, with
kubectl's kubeconfig rules), and the Events Tidal's bridge posted about it.

A pod the bridge bound carries its decision (`tidal_schemas.decision_codec`:
`tidal.dev/decision-id`, `tidal.dev/numa-cpus`, `tidal.dev/gpus`, written
with the Binding) and `spec.nodeName`; its `Scheduled` Event says which
decision bound it. A pending pod carries no decision: its `PodScheduled`
condition and `FailedScheduling` Events say why (kube-scheduler's words,
`tidal_bridge.unschedulable`), and the decision log says the rest.

Two requests whatever the cluster's size or the decision log's length."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tidal_schemas.decision_codec import read_decision

from .errors import CliError

TIDAL_COMPONENT = "tidal-bridge"  # the bridge's Event source (tidal_bridge.objects.COMPONENT)


@dataclass
class PodView:
    """What the API server says of one pod, Tidal's part of it."""

    namespace: str
    name: str
    phase: str = ""
    node: str | None = None
    scheduler: str = ""
    decision: dict[str, Any] | None = None  # as written on the pod; None: none written
    problem: str | None = None  # a decision written but unreadable
    scheduled: dict[str, Any] | None = None  # the PodScheduled condition
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        """Not bound to a node yet."""
        return not self.node

    def document(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "phase": self.phase, "node": self.node,
                "scheduler": self.scheduler, "decision": self.decision, "decision_problem": self.problem,
                "scheduled": self.scheduled, "events": self.events}


def pod_view(pod: dict[str, Any], events: list[dict[str, Any]]) -> PodView:
    """The view of `pod` (the API's JSON) and of its Events (pure)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    held, problem = read_decision(meta.get("annotations"))
    decision = None if held is None else {
        "decision_id": held.decision_id, "numa_cpus": {str(k): v for k, v in sorted(held.numa_cpus.items())},
        "gpus": [g.model_dump(mode="json", exclude_none=True) for g in held.gpus]}
    scheduled = next(({k: c.get(k) for k in ("status", "reason", "message", "lastTransitionTime")}
                      for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), None)
    return PodView(meta.get("namespace", ""), meta.get("name", ""), status.get("phase", ""), spec.get("nodeName"),
                   spec.get("schedulerName", ""), decision, problem, scheduled,
                   [tidal_event(e) for e in sorted(events, key=_when) if _by_tidal(e)])


def _by_tidal(event: dict[str, Any]) -> bool:
    return (event.get("source") or {}).get("component") == TIDAL_COMPONENT \
        or event.get("reportingComponent") == f"tidal.dev/{TIDAL_COMPONENT}"


def _when(event: dict[str, Any]) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""


def tidal_event(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": event.get("type"), "reason": event.get("reason"), "message": event.get("message"),
            "count": event.get("count") or 1, "last_seen": _when(event) or None}


async def read_pod(kubeconfig: str | None, context: str | None, namespace: str, name: str) -> PodView:
    """GET the pod, then its Events (kubectl describe's field selector)."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.config import ConfigException

    from tidal_bridge.errors import BridgeError, KubeStatusError
    from tidal_bridge.kube import Kube, configuration_for

    try:
        configuration = await configuration_for(None, kubeconfig, context)
    except (ConfigException, OSError) as exc:
        raise CliError(f"kubeconfig {kubeconfig or '(default)'}: {exc}") from None
    kube = Kube(client.ApiClient(configuration))
    try:
        try:
            pod = await kube.get_pod(namespace, name)
        except KubeStatusError as exc:
            if exc.code == 404:
                raise CliError(f"pod {namespace}/{name} not found on the API server {kube.host}",
                               exit_code=1) from None
            raise
        selector = f"involvedObject.name={name},involvedObject.namespace={namespace}"
        uid = (pod.get("metadata") or {}).get("uid")
        events = (await kube.list_events(namespace, selector + (f",involvedObject.uid={uid}" if uid else "")))
        return pod_view(pod, list(events.get("items") or ()))
    except BridgeError as exc:
        raise CliError(f"API server {kube.host}: {exc}", exit_code=1) from None
    finally:
        await kube.close()


def describe_pod(view: PodView) -> str:
    """The pod as the table shows it."""
    d, key = view.decision, f"{view.namespace}/{view.name}"
    if view.pending:
        lines = [f"pod {key}: PENDING  (no decision written on the pod; scheduler {view.scheduler or '?'})"]
    else:
        lines = [f"pod {key}: BOUND on {view.node}"
                 + (f"  (decision {d['decision_id']}, written on the pod)" if d else
                    f"  (no Tidal decision written on the pod; scheduler {view.scheduler or '?'})")]
    if view.problem:
        lines.append(f"  decision unreadable: {view.problem}")
    if d:
        if d["numa_cpus"]:
            lines.append("  exclusive CPUs per NUMA node: "
                         + ", ".join(f"numa{k}={v}" for k, v in d["numa_cpus"].items()))
        if d["gpus"]:
            lines.append("  GPUs: " + ", ".join(f"{g['gpu']} ({g.get('model') or '?'}, {g['milli']}m)"
                                                for g in d["gpus"]))
    condition = view.scheduled or {}
    if view.pending and condition.get("status") == "False":
        lines.append(f"  why: {condition.get('message') or condition.get('reason') or 'unknown'}")
    if view.events:
        lines.append("  events:")
        lines += [f"    {e['type'] or '-'}  {e['reason']}" + (f" (x{e['count']})" if e["count"] > 1 else "")
                  + f"  {e['message']}" for e in view.events]
    return "\n".join(lines)
