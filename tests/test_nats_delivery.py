"""A delivery's figures read from its reply subject (`nats_delivery`) are
the ones nats-py's own `Msg.metadata` reads: for both reply layouts, for
real deliveries from a real server (a redelivery among them), and a
message that is no JetStream delivery is refused as nats-py refuses it."""

from __future__ import annotations

import nats
import nats.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from tidal_bus.nats_delivery import delivery_of


def _from_nats_py(msg: Msg) -> tuple:
    meta = msg.metadata
    return meta.sequence.stream, meta.num_delivered, meta.num_pending, meta.timestamp, meta.sequence.consumer


@pytest.mark.parametrize("reply", [
    "$JS.ACK.orders.worker.3.1234.1200.1764180000123456789.42",  # the first layout
    "$JS.ACK._.ACCHASH.orders.worker.1.7.7.1764180000000000001.0",  # with domain and account hash
    "$JS.ACK.hub.ACCHASH.orders.worker.2.99.98.1764180000999999999.5.rAnDoM",  # and the trailing token
])
def test_both_reply_layouts_read_as_nats_py_reads_them(reply):
    msg = Msg(None, subject="x", reply=reply, data=b"")
    assert tuple(delivery_of(msg)) == _from_nats_py(msg)


@pytest.mark.parametrize("reply", ["", "_INBOX.abc", "$JS.ACK.too.short"])
def test_a_message_that_is_no_delivery_is_refused_as_nats_py_refuses_it(reply):
    with pytest.raises(nats.errors.NotJSMessageError):
        delivery_of(Msg(None, subject="x", reply=reply, data=b""))


async def test_real_deliveries_and_a_redelivery_read_as_nats_py_reads_them(nats_server, namespace):
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(name=namespace, subjects=[f"{namespace}.>"])
    try:
        for i in range(5):
            await js.publish(f"{namespace}.e", str(i).encode())
        sub = await js.pull_subscribe(f"{namespace}.e", durable="d",
                                      config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
        first = await sub.fetch(5, timeout=2)
        await first[0].nak()
        again = await sub.fetch(1, timeout=2)
        seen = [(delivery_of(m), _from_nats_py(m)) for m in [*first, *again]]
        assert [tuple(mine) for mine, _ in seen] == [theirs for _, theirs in seen]
        assert [d.position for d, _ in seen] == [1, 2, 3, 4, 5, 1]
        assert seen[-1][0].deliveries == 2  # the nak'd one, delivered again
    finally:
        await js.delete_stream(namespace)
        await nc.close()
