"""List-then-watch through kubernetes-asyncio against the fake API server:
broken streams lose and double nothing, 410 relists, bookmarks advance the
resourceVersion, failures back off; and the client calls map API answers."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import yaml
from kubernetes_asyncio import client

from conftest import patience, wait_until
from fake_kube_api import FakeKubeApi
from tidal_bridge.errors import KubeStatusError, KubeUnavailable
from tidal_bridge.kube import Kube
from tidal_bridge.settings import BridgeSettings
from tidal_bridge.watch import Backoff, Reflector

SELECTOR = "spec.schedulerName=tidal"


@pytest.fixture
async def fake():
    async with FakeKubeApi() as server:
        yield server


@pytest.fixture
async def kube(fake):
    api = await Kube.connect(BridgeSettings(kube_api_url=fake.url, request_timeout_s=5))
    yield api
    await api.close()


class Recorder:
    """A sink remembering (type, name, resourceVersion) of every change."""

    def __init__(self, fail_on: set[tuple[str, str]] | None = None) -> None:
        self.changes: list[tuple[str, str, str]] = []
        self.fail_on = fail_on or set()

    async def __call__(self, change) -> None:
        meta = change.object["metadata"]
        entry = (change.type, meta["name"], meta["resourceVersion"])
        if (meta["name"], meta["resourceVersion"]) in self.fail_on:
            self.fail_on.discard((meta["name"], meta["resourceVersion"]))
            raise RuntimeError("bus down")
        self.changes.append(entry)


@contextlib.asynccontextmanager
async def reflecting(kube, resource="pods", sink=None, **options):
    sink = sink or Recorder()
    options.setdefault("backoff", Backoff(0.02, 0.2))
    reflector = Reflector(kube, resource, sink, field_selector=SELECTOR if resource == "pods" else None,
                          timeout_s=options.pop("timeout_s", 30), **options)
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.synced.wait(), patience(5))
        yield reflector, sink
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def watching(fake, watches_before: int = 0) -> None:
    await wait_until(lambda: len(fake.watchers) == 1 and fake.count("GET", "/pods", watch="True") > watches_before,
                     5, "watch open")


async def test_list_then_watch_from_the_lists_resource_version(fake, kube):
    a = fake.add_pod("a")                       # rv 1
    fake.add_pod("other", scheduler="default")  # rv 2, not ours
    async with reflecting(kube) as (reflector, sink):
        await watching(fake)
        b = fake.add_pod("b")                   # rv 3
        fake.delete_pod("default", "a")         # rv 4
        await wait_until(lambda: len(sink.changes) == 3, 5, "3 changes")
    assert sink.changes == [("ADDED", "a", a["metadata"]["resourceVersion"]),
                            ("ADDED", "b", b["metadata"]["resourceVersion"]), ("DELETED", "a", "4")]
    _, _, query = next(r for r in fake.requests if r[2].get("watch") == "True")
    assert query["resourceVersion"] == "2" and query["allowWatchBookmarks"] == "True"  # the list's version
    assert query["fieldSelector"] == SELECTOR


@pytest.mark.parametrize("mode", ["abort", "partial", "eof"])
async def test_a_watch_broken_mid_stream_loses_and_doubles_nothing(fake, kube, mode):
    fake.add_pod("a")
    async with reflecting(kube) as (reflector, sink):
        for round_ in range(3):
            await watching(fake, fake.count("GET", "/pods", watch="True") - 1)
            opened = fake.count("GET", "/pods", watch="True")
            fake.update_pod("default", "a", lambda p, r=round_: p["metadata"]["labels"].update(round=str(r)))
            fake.break_watches(mode)            # after the change above, before the ones below
            fake.add_pod(f"b{round_}")
            fake.update_pod("default", "a", lambda p, r=round_: p["metadata"]["labels"].update(after=str(r)))
            await watching(fake, opened)
        await wait_until(lambda: len(sink.changes) == 1 + 3 * 3, 5, "all changes")
    expected = [("ADDED", "a", "1")]
    rv = 1
    for round_ in range(3):
        expected += [("MODIFIED", "a", str(rv + 1)), ("ADDED", f"b{round_}", str(rv + 2)),
                     ("MODIFIED", "a", str(rv + 3))]
        rv += 3
    assert sink.changes == expected
    assert reflector.stats.lists == 1 and reflector.stats.watches >= 4
    assert reflector.stats.failures == (0 if mode == "eof" else 3)  # a clean end is not a failure


async def test_410_gone_relists_and_reports_only_what_changed(fake, kube):
    fake.add_pod("stays")
    fake.add_pod("goes")
    fake.add_pod("changes")
    async with reflecting(kube) as (reflector, sink):
        await watching(fake)
        fake.break_watches("abort")
        # while disconnected: a delete, an update and a new pod, then history is compacted
        fake.delete_pod("default", "goes")                                          # rv 4
        fake.update_pod("default", "changes", lambda p: p["status"].update(phase="Running"))  # rv 5
        fake.add_pod("new")                                                         # rv 6
        fake.compact()
        await wait_until(lambda: reflector.stats.lists == 2, 5, "relist")
        await wait_until(lambda: len(sink.changes) == 6, 5, "changes")
    assert sink.changes[3:] == [("MODIFIED", "changes", "5"), ("ADDED", "new", "6"), ("DELETED", "goes", "2")]
    assert reflector.stats.expired == 1
    assert reflector.resource_version == "6"


async def test_objects_are_found_by_name_as_last_seen_also_across_a_replacement(fake, kube):
    fake.add_pod("a")
    fake.add_pod("b")
    async with reflecting(kube, keep=lambda obj: {"metadata": obj["metadata"]}) as (reflector, sink):
        await watching(fake)
        assert reflector.get("default", "a")["metadata"]["uid"] == fake.pod("default", "a")["metadata"]["uid"]
        assert set(reflector.get("default", "a")) == {"metadata"}  # as kept
        fake.break_watches("abort")
        # while disconnected: a replaced by a pod of the same name, b deleted; the relist sees the new a
        # before the old one's deletion
        fake.delete_pod("default", "a")
        successor = fake.add_pod("a")
        fake.delete_pod("default", "b")
        fake.compact()
        await wait_until(lambda: reflector.stats.lists == 2, 5, "relist")
        await wait_until(lambda: len(sink.changes) == 5, 5, "changes")
        assert reflector.get("default", "a")["metadata"]["uid"] == successor["metadata"]["uid"]
        assert reflector.get("default", "b") is None and reflector.get("other", "a") is None
    # the old a's deletion before its successor: readers that key pods by name keep the successor
    assert sink.changes[2:] == [("DELETED", "a", "1"), ("ADDED", "a", successor["metadata"]["resourceVersion"]),
                                ("DELETED", "b", "2")]


async def test_410_as_an_http_status_also_relists(fake, kube):
    fake.add_pod("a")
    async with reflecting(kube) as (reflector, sink):
        await watching(fake)
        fake.fail("GET", "/api/v1/pods", 410, times=1)
        fake.break_watches("eof")
        await wait_until(lambda: reflector.stats.lists == 2, 5, "relist")
    assert reflector.stats.expired == 1 and sink.changes == [("ADDED", "a", "1")]


class CountingBackoff(Backoff):
    def __init__(self) -> None:
        super().__init__(0.01, 0.05)
        self.waits = 0

    def next(self) -> float:
        self.waits += 1
        return super().next()


async def test_a_watch_that_expires_right_after_each_list_is_not_hammered(fake, kube):
    fake.add_pod("a")
    fake.fail("GET", "/api/v1/pods", 410, times=3, watch="True")
    backoff = CountingBackoff()
    async with reflecting(kube, backoff=backoff) as (reflector, sink):
        await watching(fake)
    assert (reflector.stats.lists, reflector.stats.expired, backoff.waits) == (4, 3, 3)
    assert sink.changes == [("ADDED", "a", "1")]  # relisting an unchanged pod hands over nothing


async def test_bookmarks_move_the_resource_version_past_changes_we_do_not_watch(fake, kube):
    fake.add_pod("a")
    async with reflecting(kube) as (reflector, sink):
        await watching(fake)
        for i in range(5):
            fake.add_pod(f"other{i}", scheduler="default-scheduler")  # rv 2..6, filtered out by the server
        fake.send_bookmarks()
        await wait_until(lambda: reflector.resource_version == "6", 5, "bookmark")
        fake.compact()                     # history up to 6 is gone; the bookmark made that harmless
        fake.break_watches("eof")
        await wait_until(lambda: fake.count("GET", "/pods", watch="True", resourceVersion="6") == 1, 5, "rewatch")
        fake.add_pod("b")
        await wait_until(lambda: len(sink.changes) == 2, 5, "b")
    assert reflector.stats.lists == 1 and reflector.stats.expired == 0 and reflector.stats.bookmarks == 1


async def test_api_failures_back_off_then_recover(fake, kube):
    fake.add_pod("a")
    fake.fail("GET", "/api/v1/pods", 503, times=3)
    async with reflecting(kube) as (reflector, sink):
        await watching(fake)
    assert reflector.stats.failures == 3 and reflector.stats.lists == 1
    assert sink.changes == [("ADDED", "a", "1")]


async def test_a_failing_sink_gets_the_change_again(fake, kube):
    fake.add_pod("a")
    sink = Recorder(fail_on={("b", "2")})
    async with reflecting(kube, sink=sink) as (reflector, _):
        await watching(fake)
        fake.add_pod("b")
        fake.add_pod("c")
        await wait_until(lambda: len(sink.changes) == 3, 5, "b and c")
    assert sink.changes == [("ADDED", "a", "1"), ("ADDED", "b", "2"), ("ADDED", "c", "3")]
    assert reflector.stats.failures == 1


async def test_every_node_is_watched(fake, kube):
    fake.add_node("n1")
    async with reflecting(kube, "nodes") as (reflector, sink):
        await wait_until(lambda: len(fake.watchers) == 1, 5, "watch")
        fake.add_node("n2", labels={"gpu": "yes"})
        fake.update_node("n1", lambda n: n["spec"].update(unschedulable=True))
        await wait_until(lambda: len(sink.changes) == 3, 5, "nodes")
    assert [c[:2] for c in sink.changes] == [("ADDED", "n1"), ("ADDED", "n2"), ("MODIFIED", "n1")]
    assert "fieldSelector" not in fake.requests[-1][2]


def test_backoff_doubles_up_to_its_cap_and_resets():
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5


async def test_the_generated_binding_call_trips_on_its_response_and_ours_does_not(fake, kube):
    fake.add_node("n1")
    fake.add_pod("p1")
    fake.add_pod("p2")
    body = client.V1Binding(metadata=client.V1ObjectMeta(name="p1"),
                            target=client.V1ObjectReference(api_version="v1", kind="Node", name="n1"))
    with pytest.raises(ValueError, match="target"):  # the pod *is* bound; the client fails to read the Status
        await kube.core.create_namespaced_pod_binding("p1", "default", body)
    assert fake.pod("default", "p1")["spec"]["nodeName"] == "n1"
    status = await kube.bind("default", "p2", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p2"},
                                               "target": {"kind": "Node", "name": "n1"}})
    assert (status["kind"], status["code"]) == ("Status", 201)


async def test_error_statuses_and_transport_failures_are_told_apart(fake, kube):
    with pytest.raises(KubeStatusError) as missing:
        await kube.get_pod("default", "nope")
    assert (missing.value.code, missing.value.reason, missing.value.retriable) == (404, "NotFound", False)
    fake.fail("PATCH", "/nodes/", 503)
    with pytest.raises(KubeStatusError) as busy:
        await kube.patch_node("n1", {"metadata": {"annotations": {"a": "b"}}})
    assert (busy.value.code, busy.value.retriable) == (503, True)
    dead = Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:1")), request_timeout_s=2)
    with pytest.raises(KubeUnavailable):
        await dead.get_node("n1")
    await dead.close()


async def test_a_kubeconfig_file_points_the_client_at_its_server(fake, tmp_path):
    fake.add_node("n1")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "other",
        "clusters": [{"name": "fake", "cluster": {"server": fake.url}},
                     {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "tester", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "test", "context": {"cluster": "fake", "user": "tester"}},
                     {"name": "other", "context": {"cluster": "nowhere", "user": "tester"}}]}))
    api = await Kube.connect(BridgeSettings(kubeconfig=str(kubeconfig), kube_context="test"))
    try:
        node = await api.get_node("n1")
    finally:
        await api.close()
    assert node["metadata"]["name"] == "n1" and fake.authorizations == ["Bearer t0ken"]


async def test_the_list_comes_in_pages_of_one_snapshot(fake, kube):
    for name in ("c", "a", "e", "b", "d"):
        fake.add_pod(name)
    async with reflecting(kube, page_size=2) as (reflector, sink):
        pass
    lists = [q for m, p, q in fake.requests if m == "GET" and p == "/api/v1/pods" and q.get("watch") != "True"]
    assert [q.get("limit") for q in lists] == ["2", "2", "2"] and "continue" not in lists[0]
    assert all(q.get("continue") for q in lists[1:])
    assert sorted(name for _, name, _ in sink.changes) == ["a", "b", "c", "d", "e"]
    assert reflector.resource_version == "5" and reflector.stats.lists == 1


async def test_a_list_whose_snapshot_is_gone_before_its_last_page_is_listed_again(fake, kube):
    for name in ("a", "b", "c"):
        fake.add_pod(name)
    paged = []

    def forget_after_the_first_page(method: str, path: str) -> None:
        if method == "GET" and path == "/api/v1/pods":
            paged.append(path)
            if len(paged) == 2:  # as the API server compacts: the first list's token is now too old
                fake.pages = type(fake.pages)()
    fake.on_request = forget_after_the_first_page
    async with reflecting(kube, page_size=2) as (reflector, sink):
        pass
    assert sorted(name for _, name, _ in sink.changes) == ["a", "b", "c"]  # each handed once
    assert reflector.stats.expired == 1 and reflector.stats.lists == 1


async def test_a_resource_the_server_does_not_serve_is_named_with_the_likely_cause(fake, kube, caplog):
    reflector = Reflector(kube, "tenants", Recorder(), backoff=Backoff(0.02, 0.05))  # no Tenant CRD installed
    task = asyncio.create_task(reflector.run())
    await wait_until(lambda: reflector.stats.failures >= 2, 5, "two failed lists")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    said = [r.getMessage() for r in caplog.records if r.name == "tidal_bridge.watch"]
    assert said and all("serves no tenants (404)" in m and "CustomResourceDefinition" in m for m in said)
