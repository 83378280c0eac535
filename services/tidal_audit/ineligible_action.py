"""Every eviction and freeze was eligible when taken, and decided once (§F 6):

- evict (§D): the pod is held on that node and not system-critical, and no
  pod of a lower §D rank was left there — while the pod is not labelled
  evictable, no evictable pod; and no pod of lower priority. Candidates are
  the node's other held, not system-critical pods not already being
  evicted, that use memory in the node's last sample (§D never picks a pod
  that frees nothing);
  A pod the node's last usage sample shows there counts as there (the node
  agent can report a pod before the bridge does), or the sample the action
  was decided on, when it names one (`measured["at"]`, a remediation round's
  sample time): a stage reading a stream that lags still decides on what it
  was shown, even if the pod has gone since;
- freeze (§E): the pod is on that node, best-effort, not
  system-critical and not frozen already;
- move (set-cpuset, asked by remediation, §E): the pod is latency-sensitive;
- once: the same action kind on the same pod is not asked again under a new
  id while an earlier one is done or unanswered (a freeze stands until the
  pod is thawed, an eviction until it is refused or fails); a move is over
  once answered: the pod may be moved again later. An id seen again after
  its answer (a re-send that crossed the answer, or a publish retried across
  a broker failover) is the same decision, not a new one.

Which of several eligible BE pods §E freezes first (highest usage) depends
on the remediation round's own projection; it is not checked here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tidal_schemas import ActionResult, Envelope, NodeAction, NodeMetrics, PodLifecycle, PodUsage

from .holdings import holding
from .violation import Violation, cite

NAME = "ineligible-action"
CHECKED = ("evict", "freeze", "set-cpuset")
SAMPLES_KEPT = 16  # per node: far more than a stage lags behind


class IneligibleAction:
    def __init__(self) -> None:
        self.pods: dict[str, PodLifecycle] = {}
        self.on_node: dict[str, set[str]] = defaultdict(set)
        self.sampled: dict[str, dict[str, PodUsage]] = {}  # node -> pod -> its usage in the node's last sample
        self.recent: dict[str, dict[float, dict[str, PodUsage]]] = defaultdict(dict)  # node -> sample time -> pods
        self.asked: dict[tuple[str, str], tuple[str, Envelope[Any]]] = {}  # (kind, pod) -> standing action id
        self.frozen: set[str] = set()
        self.over: set[str] = set()  # ids whose ask ended: a copy of one reopens nothing

    def feed(self, envelope: Envelope[Any]) -> list[Violation]:
        p = envelope.payload
        if isinstance(p, PodLifecycle):
            self._pod(p)
        elif isinstance(p, NodeMetrics):
            self.sampled[p.node] = {u.pod: u for u in p.pods}
            recent = self.recent[p.node]
            recent[p.sampled_at.timestamp()] = self.sampled[p.node]
            if len(recent) > SAMPLES_KEPT:
                del recent[min(recent)]
        elif isinstance(p, ActionResult):
            self._result(p)
        elif isinstance(p, NodeAction) and p.kind in CHECKED and p.pod and not p.dry_run:
            return self._action(p, envelope)
        return []

    def _pod(self, pod: PodLifecycle) -> None:
        key = pod.event_key()
        old = self.pods.get(key)
        if old is not None and old.node:
            self.on_node[old.node].discard(key)
        if holding(pod) is None:
            self.pods.pop(key, None)
            self.frozen.discard(key)
            for kind in CHECKED:
                gone = self.asked.pop((kind, key), None)
                if gone is not None:
                    self.over.add(gone[0])
            return
        self.pods[key] = pod
        self.on_node[pod.node].add(key)

    def _result(self, result: ActionResult) -> None:
        key = result.pod or ""
        standing = self.asked.get((result.kind, key))
        if result.kind == "freeze" and result.status == "done":
            self.frozen.add(key)
        elif result.kind == "thaw" and result.status == "done":
            self.frozen.discard(key)
            thawed = self.asked.pop(("freeze", key), None)
            if thawed is not None:
                self.over.add(thawed[0])
        if standing is not None and standing[0] == result.action_id and (
                result.status != "done" or result.kind == "set-cpuset"):
            del self.asked[(result.kind, key)]
            self.over.add(result.action_id)

    def _action(self, action: NodeAction, envelope: Envelope[Any]) -> list[Violation]:
        key = action.pod or ""
        if action.action_id in self.over:
            return []
        found: list[str] = []
        standing = self.asked.get((action.kind, key))
        if standing is not None and standing[0] != action.action_id:
            return [Violation(NAME, f"{action.kind} of pod {key} decided twice",
                              (cite(standing[1], standing[0]), cite(envelope, action.action_id)))]
        self.asked[(action.kind, key)] = (action.action_id, envelope)
        pod = self.pods.get(key)
        decided_on = self.recent[action.node].get(action.measured.get("at", -1.0))
        sample = (decided_on if decided_on is not None else self.sampled.get(action.node, {})).get(key)
        if pod is not None and pod.node != action.node:
            pod = None
        qos, critical = (pod.qos, pod.system_critical) if pod else (sample.qos if sample else "", False)
        if pod is None and sample is None:
            found.append(f"pod {key} is not on node {action.node}")
        elif action.kind == "evict":
            found += self._evict_problems(pod) if pod is not None else []
        elif action.kind == "freeze":
            if qos != "BE" or critical or key in self.frozen:
                found.append(f"pod {key} is {qos}{', system-critical' if critical else ''}"
                             f"{', frozen already' if key in self.frozen else ''}: §E freezes unfrozen BE pods only")
        elif action.requested_by == "remediation" and qos != "LS":
            found.append(f"pod {key} is {qos}: §E moves latency-sensitive pods only")
        return [Violation(NAME, f"{action.kind} by {action.requested_by or envelope.source}: {problem}",
                          (cite(envelope, action.reason[:80]),)) for problem in found]

    def _evict_problems(self, pod: PodLifecycle) -> list[str]:
        if pod.system_critical:
            return [f"pod {pod.event_key()} is system-critical: never evicted"]
        if pod.evictable:
            return []
        used = {k: u.memory_mib for k, u in self.sampled[pod.node].items()} if pod.node in self.sampled else None
        others = [self.pods[k] for k in self.on_node[pod.node or ""] if k != pod.event_key()]
        left = [o for o in others if not o.system_critical and ("evict", o.event_key()) not in self.asked
                and (used is None or used.get(o.event_key(), 0) > 0)]
        problems = [f"evictable pod {o.event_key()} was left on the node" for o in left if o.evictable][:1]
        problems += [f"pod {o.event_key()} of lower priority {o.priority} < {pod.priority} was left on the node"
                     for o in left if not o.evictable and o.priority < pod.priority][:1]
        return [f"pod {pod.event_key()} is not first in the §D order: {p}" for p in problems]
