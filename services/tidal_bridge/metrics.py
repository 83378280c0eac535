"""The bridge's metrics, on the service's /metrics beside the runtime's.

client-go's names and labels for the API requests (the bridge is Tidal's
only client of the API server), with the resource added:

    rest_client_requests_total{code, method, host, resource}
    rest_client_request_duration_seconds{verb, host, resource}

`verb` and `method` are the HTTP method, as client-go labels them (a list
and a watch are both GET; a watch is timed until its response starts),
`resource` the path's resource and subresource (`pods/binding`,
`tenants/status`), `code` the status code or `<error>` when none came.
Summed over `resource` they are client-go's series.

Tidal's own:

    tidal_bridge_binds_total{cluster, result}           bound | refused | unavailable
    tidal_bridge_binds_in_flight{state}                 running | waiting (binds_in_flight.py)
    tidal_bridge_relists_total{resource}                lists completed (the first one too)
    tidal_bridge_watch_restarts_total{resource, reason} ended | expired | failed
    tidal_bridge_watch_bookmarks_total{resource}

A watch restarts when the server ended it (`ended`: its timeoutSeconds,
the normal case), when its resourceVersion expired (`expired`: 410 Gone,
followed by a relist), or when a list, the watch or the sink failed
(`failed`: backed off, watched again from the last event handled). The
watch counts are read from each reflector's `WatchStats` at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

from .binds_in_flight import BindsInFlight
from .watch import Reflector

# client-go's rest_client_request_duration_seconds buckets
REQUEST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
RESTARTS = {"ended": "ended", "expired": "expired", "failed": "failures"}  # reason -> WatchStats field


class ApiRequests:
    """A `kube.RequestObserver` counting and timing every request to one API server."""

    def __init__(self, registry: CollectorRegistry, host: str = "") -> None:
        self.host = host  # set once the API server is known
        self.total = Counter("rest_client_requests_total", "Number of HTTP requests, partitioned by status code, "
                             "method, host and resource", ["code", "method", "host", "resource"], registry=registry)
        self.seconds = Histogram("rest_client_request_duration_seconds", "Request latency in seconds, broken down "
                                 "by verb, host and resource", ["verb", "host", "resource"],
                                 buckets=REQUEST_BUCKETS, registry=registry)

    def request(self, method: str, resource: str, code: str, seconds: float) -> None:
        self.total.labels(code, method, self.host, resource).inc()
        self.seconds.labels(method, self.host, resource).observe(seconds)


class WatchCollector:
    """The watch counters of the reflectors `reflectors()` gives, read at scrape time."""

    def __init__(self, reflectors: Callable[[], Iterable[Reflector | None]]) -> None:
        self.reflectors = reflectors

    def collect(self):
        relists = CounterMetricFamily("tidal_bridge_relists_total", "Lists of a watched resource completed "
                                      "(the first, and each after a 410 Gone)", labels=["resource"])
        restarts = CounterMetricFamily("tidal_bridge_watch_restarts_total", "Watches started again, by why the "
                                       "last one ended (ended, expired, failed)", labels=["resource", "reason"])
        bookmarks = CounterMetricFamily("tidal_bridge_watch_bookmarks_total", "BOOKMARK events read",
                                        labels=["resource"])
        for reflector in self.reflectors():
            if reflector is None:
                continue
            stats, resource = reflector.stats, reflector.resource
            relists.add_metric([resource], stats.lists)
            for reason, field in RESTARTS.items():
                restarts.add_metric([resource, reason], getattr(stats, field))
            bookmarks.add_metric([resource], stats.bookmarks)
        return [relists, restarts, bookmarks]


class BridgeMetrics:
    """The bridge's families in `registry`; `api(host)` observes the requests
    once the API server is known."""

    def __init__(self, registry: CollectorRegistry, cluster: str,
                 reflectors: Callable[[], Iterable[Reflector | None]],
                 binds: Callable[[], BindsInFlight | None]) -> None:
        self.cluster = cluster
        self.binds = Counter("tidal_bridge_binds_total", "Placed decisions carried out, by result (bound, "
                             "refused, unavailable)", ["cluster", "result"], registry=registry)
        for result in ("bound", "refused", "unavailable"):
            self.binds.labels(cluster, result)  # exported from the start: a rate of 0 is not a missing series
        in_flight = Gauge("tidal_bridge_binds_in_flight", "Binds started and not ended: running (holding a "
                          "place) or waiting (for the pod's bind before, its GPU gate or a place)", ["state"],
                          registry=registry)
        in_flight.labels("running").set_function(lambda: getattr(binds(), "running", 0))
        in_flight.labels("waiting").set_function(lambda: getattr(binds(), "waiting", 0))
        registry.register(WatchCollector(reflectors))
        self._api = ApiRequests(registry)

    def api(self, host: str) -> ApiRequests:
        """The request observer for the API server at `host` (host:port)."""
        self._api.host = host
        return self._api

    def bound(self, result: str) -> None:
        """A bind ended with `result` (`BindOutcome.result`)."""
        self.binds.labels(self.cluster, result).inc()
