"""Remediation times unanswered actions on its own clock (issue 51): a
replay that sets it re-sends an action when the recording did, whatever the
machine's clock says."""

from __future__ import annotations

import asyncio

from conftest import wait_until
from test_remediation_state import T0, action
from tidal_clock import ReplayClock
from tidal_remediation.service import RemediationService
from tidal_remediation.settings import RemediationSettings


class CountedClock(ReplayClock):
    """A ReplayClock that counts its reads: a round of the retry loop has run once it was read."""

    reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return super().__call__()


async def test_an_unanswered_action_is_sent_again_by_the_services_clock():
    # timeout 60 s; the freeze was sent at T0 (2026-01-01 12:00), long before the machine's now
    service = RemediationService(RemediationSettings(bus_url="nats://127.0.0.1:1", cluster="c1", http_port=0,
                                                     action_timeout_s=60, retry_check_s=0.01))
    sent = []

    async def publish(payload, **options):
        sent.append(payload)

    service.publish = publish
    service.clock = clock = CountedClock(T0.timestamp() + 59)
    service._memory("c1").record_action(action("freeze", "a", at=T0))
    service.memory_ready.set()
    task = asyncio.create_task(service.retry_unanswered())
    try:
        await wait_until(lambda: clock.reads >= 2, what="two rounds at T0 + 59 s")
        assert sent == []  # 59 s: not yet due, by the service's clock
        clock.advance_to(T0.timestamp() + 60)
        await wait_until(lambda: sent, what="the freeze sent again")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    [again] = sent
    assert (again.kind, again.pod, again.measured["attempt"]) == ("freeze", "a", 2.0)
    assert again.measured["sent_at"] == T0.timestamp() + 60
