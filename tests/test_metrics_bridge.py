"""The bridge's metrics scraped from a running bridge (real NATS, the
repository's API server stand-in) over HTTP, as Prometheus would: API
requests by code, method and resource with their latency (client-go's
names), binds by result, binds in flight, relists and watch restarts by
reason, and the build info."""

from __future__ import annotations

from conftest import wait_until
from metrics_scrape import eventually, value
from test_bridge_service import Stream, bus, fake, placed, running, settings  # noqa: F401 (fixtures)
from tidal_schemas import PlacementDecision, PlacementDecisions


async def test_bridge_exports_api_bind_and_watch_metrics(nats_server, namespace, fake, bus):
    fake.add_pod("web")
    fake.add_pod("flaky")
    results = Stream(bus, "bind.result")
    config = settings(nats_server, namespace, fake, api_attempts=2, watch_tenants=False)
    async with running(config) as (service,):
        pods = service.pods.stats
        # A clean end of every watch (its timeoutSeconds), then 410 for the pods' next watch: a relist
        fake.fail("GET", "/api/v1/pods", 410, times=1, watch="True")
        fake.break_watches("eof")
        await wait_until(lambda: pods.expired == 1 and pods.lists == 2 and pods.watches >= 2, what="a relist")
        await wait_until(lambda: len(fake.store.watchers) == 2, what="both watches open again")
        fake.break_watches("abort")  # a broken connection: backed off, watched again
        await wait_until(lambda: pods.failures >= 1 and service.nodes.reflector.stats.failures >= 1,
                         what="both watches failed once")

        fake.fail("POST", "/pods/flaky/binding", 503, times=2)  # both tries of its bind fail
        await bus.publish(placed("web", decision_id="d-web"))
        await bus.publish(placed("ghost", decision_id="d-ghost"))  # no such pod: refused
        await bus.publish(placed("flaky", decision_id="d-flaky"))
        await results.wait(lambda es: len(es) == 3, "three bind results")
        families = await eventually(
            service, lambda f: value(f, "tidal_bridge_binds_total") == 3, what="three binds counted")

    host = f"127.0.0.1:{fake.url.rsplit(':', 1)[1].rstrip('/')}"
    requests = "rest_client_requests_total"
    assert value(families, requests, code="201", method="POST", host=host, resource="pods/binding") == 1
    assert value(families, requests, code="503", method="POST", resource="pods/binding") == 2
    assert value(families, requests, code="404", method="GET", resource="pods") == 1  # reading "ghost"
    assert value(families, requests, code="200", method="GET", resource="nodes") >= 2  # lists and watches
    assert value(families, requests, code="410", method="GET", resource="pods") == 1
    seconds = "rest_client_request_duration_seconds"
    assert value(families, f"{seconds}_count", verb="POST", host=host, resource="pods/binding") == 3
    assert 0 < value(families, f"{seconds}_sum", verb="POST", resource="pods/binding") < 3 * 5  # under the timeout
    # the Scheduled Event of the one bound pod
    assert value(families, requests, method="POST", resource="events") >= 1

    assert value(families, "tidal_bridge_binds_total", cluster="c1", result="bound") == 1
    assert value(families, "tidal_bridge_binds_total", cluster="c1", result="refused") == 1
    assert value(families, "tidal_bridge_binds_total", cluster="c1", result="unavailable") == 1

    assert value(families, "tidal_bridge_relists_total", resource="pods") == 2
    assert value(families, "tidal_bridge_relists_total", resource="nodes") == 1
    assert value(families, "tidal_bridge_watch_restarts_total", resource="pods", reason="expired") == 1
    assert value(families, "tidal_bridge_watch_restarts_total", resource="pods", reason="ended") >= 1
    assert value(families, "tidal_bridge_watch_restarts_total", resource="nodes", reason="ended") >= 1
    assert value(families, "tidal_bridge_watch_restarts_total", resource="nodes", reason="expired") == 0
    assert value(families, "tidal_bridge_watch_restarts_total", resource="nodes", reason="failed") >= 1

    assert value(families, "tidal_bridge_binds_in_flight", state="running") == 0
    assert value(families, "tidal_bridge_binds_in_flight", state="waiting") == 0
    assert value(families, "tidal_build_info") == 1


async def test_binds_in_flight_show_running_and_waiting(nats_server, namespace, fake, bus):
    for name in ("a", "b", "c"):
        fake.add_pod(name)
    fake.slow("POST", "/binding", 0.5)  # three in turn: 1.5 s, under the tests' ack wait (3 s)
    config = settings(nats_server, namespace, fake, bind_concurrency=1, watch_tenants=False)
    async with running(config) as (service,):
        await bus.publish(PlacementDecisions(items=[
            PlacementDecision(decision_id=f"d-{n}", namespace="default", name=n, outcome="placed", node="n1")
            for n in ("a", "b", "c")]))
        # one place: one bind runs, the other two wait for it
        families = await eventually(
            service, lambda f: value(f, "tidal_bridge_binds_in_flight", state="running") == 1
            and value(f, "tidal_bridge_binds_in_flight", state="waiting") == 2, what="one running, two waiting")
        assert value(families, "tidal_bridge_binds_total") == 0
        # each bind ends after its bind result and Scheduled Event, which follow the count; a decision
        # redelivered while its event waited for its binds counts again (found bound by this decision)
        after = await eventually(service, lambda f: value(f, "tidal_bridge_binds_total", result="bound") >= 3
                                 and value(f, "tidal_bridge_binds_in_flight") == 0, timeout=30, what="all bound")
    assert value(after, "tidal_bridge_binds_total", result="refused") == 0
    assert value(after, "rest_client_requests_total", method="POST", resource="pods/binding") == 3  # one each
    assert value(after, "rest_client_request_duration_seconds_sum", verb="POST", resource="pods/binding") >= 3 * 0.5
