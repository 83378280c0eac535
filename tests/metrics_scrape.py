"""Reading a service's /metrics in tests: scrape over HTTP, look values up,
and list the series names a registry exports."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from conftest import patience

SERIES_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


async def scrape(service) -> dict[str, list]:
    """Family name -> samples, as the service serves them on /metrics."""
    families, _ = await scrape_typed(service)
    return families


async def scrape_typed(service) -> tuple[dict[str, list], dict[str, str]]:
    """`scrape`, and family name -> its type (counter, gauge, histogram …)."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{service.http.port}/metrics") as response:
            assert response.status == 200
            text = await response.text()
    families = list(text_string_to_metric_families(text))
    return {f.name: f.samples for f in families}, {f.name: f.type for f in families}


def value(families: dict[str, list], sample: str, **labels: str) -> float:
    """The sum of `sample` over the series whose labels include `labels`."""
    names = [name for name in families if sample.startswith(name)]
    assert names, f"{sample} not exported; have {sorted(families)}"
    family = families[max(names, key=len)]  # the longest: `x_total` is family `x`, not some shorter `x…`
    return sum(s.value for s in family if s.name == sample and labels.items() <= s.labels.items())


async def eventually(service, check, timeout: float = 15.0, what: str = "metrics"):
    """Scrape until `check(families)` holds; the last families."""
    deadline = asyncio.get_running_loop().time() + patience(timeout)
    while True:
        families = await scrape(service)
        if check(families):
            return families
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last scrape: {families}")
        await asyncio.sleep(0.1)


def series_names(registry: CollectorRegistry) -> set[str]:
    """Every series name `registry` exports or would export once labelled:
    a counter `x_total`, a histogram's `x_bucket` / `x_sum` / `x_count`."""
    names = set()
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            base = name.removesuffix("_total") if kind == "counter" else name
            names.update([name, *(base + s for s in SERIES_SUFFIXES.get(kind, ()))])
    return names
