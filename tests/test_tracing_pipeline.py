"""One pod's way through the real services, traced: the bridge reports the
pod from the (fake, real wire protocol) Kubernetes API, placement decides,
the bridge binds, and the node agent takes the decision into its CPU books
and publishes the pod's cpuset, over a real NATS server. With the SDK's
in-memory exporter, every span of that way belongs to one trace: the
decision travels in an event of its cycle's decisions, and names its pod's
trace itself."""

from __future__ import annotations

from conftest import start_service, wait_until
from span_capture import parent_id, span_id, spans, trace_id  # noqa: F401  (spans is a fixture)
from test_cluster_path import CLUSTER, cluster_path
from tidal_topology.service import TopologyService
from tidal_topology.settings import TopologySettings

NODE = "traced-node"
EXCLUSIVE = {"tidal.dev/exclusive-cpus": "true"}


async def test_one_pods_spans_share_one_trace_across_four_services(nats_server, namespace, tmp_path, spans):
    async with cluster_path(nats_server, namespace) as path:
        path.kube.add_node(NODE, cpu="2")
        # the node agent of this machine, its two CPUs declared two NUMA nodes
        agent = TopologyService(TopologySettings(
            bus_url=nats_server.url, namespace=namespace, cluster=CLUSTER, http_port=0, http_host="127.0.0.1",
            node_name=NODE, numa_override="0:0,1:1", interval_s=5, state_file=str(tmp_path / "cpu-state.json"),
            cgroup_parent="tidal-none", drain_timeout_s=2), bus=await path.own_bus("topology"))
        path.services.append((agent, await start_service(agent, timeout=30)))
        placement = await path.start_placement()
        await wait_until(lambda: NODE in placement.clusters[CLUSTER].state.free_by_node(), 20, "the node known")
        # The chain below is the decision's: the agent takes the CPUs on reading it. Read after the
        # pod's bound event, the agent adopts the pod from that event instead (books.on_pod), and the
        # cpuset continues the pod event's span. Under a loaded suite the decision's consumer once
        # lagged that far behind; the Binding answered two seconds late keeps the order this test reads.
        path.kube.slow("POST", "/binding", 2.0)

        path.pod("traced", cpu="1", annotations=EXCLUSIVE)
        await path.wait_bound("traced")
        key = "default/traced"
        # the agent's cpuset for the pod (a node's event: its key is the node)
        await wait_until(lambda: spans.named("topology publish cpu.assignment", key=NODE), 20, "the cpuset published")

    decided = spans.one("placement create placement.decision", key=key)  # the pod's decision
    assert decided.attributes["tidal.outcome"] == "ok"
    trace = trace_id(decided)
    reported = [s for s in spans.named("bridge publish pod.lifecycle", key=key) if trace_id(s) == trace]
    assert len(reported) == 1 and reported[0].parent is None, "the decision continues the bridge's pod event"
    followed = [s for s in spans.named("placement pod.lifecycle", key=key) if trace_id(s) == trace]
    assert [parent_id(s) for s in followed] == [span_id(reported[0])]
    assert parent_id(decided) == span_id(followed[0])
    sent = spans.one("placement publish placement.decision", key=key)  # the event, in its first decision's trace
    assert parent_id(sent) == span_id(decided)

    bind = spans.one("bridge process placement.decision", key=key)  # the bridge's binder, on this pod's decision
    bound = spans.one("bridge publish bind.result", key=key)
    agent_took = spans.one("topology process placement.decision", key=key)
    cpuset = spans.one("topology publish cpu.assignment", key=NODE)
    assert parent_id(bind) == span_id(decided) and parent_id(agent_took) == span_id(decided)
    assert parent_id(bound) == span_id(bind) and parent_id(cpuset) == span_id(agent_took)
    chain = [reported[0], followed[0], decided, sent, bind, bound, agent_took, cpuset]
    assert {trace_id(s) for s in chain} == {trace}
    assert {s.attributes["tidal.service"] for s in chain} == {"bridge", "placement", "topology"}
    assert {s.attributes["tidal.outcome"] for s in chain} == {"ok"}
