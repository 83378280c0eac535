"""Per-node figures of one stream partition, published as one event: a
stage answering every node's sample (scoring's scores, oversell's
allocatable) sends one event for the samples it has in hand, not one each
(`item_batch`; `tidal_runtime.output_batches` sends them).

An event is keyed by its first node, and every node in it belongs to that
key's partition of the stream, so a reader owning the partition owns every
node in it. Version 1 of these streams carried one node's figures as the
payload itself; such an event reads as a batch of one.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import Field, model_validator

from .item_batch import ItemBatch
from .streams import partition_for, stream

MAX_ITEMS = 256  # per event: well under the broker's message limit at a few hundred bytes each


Item = TypeVar("Item")  # a record with a `node`


class NodeBatch(ItemBatch[Item], Generic[Item]):
    """`items`: one partition's nodes' figures, in sample order."""

    ONE_ITEM_FIELD = "node"
    items: list[Item] = Field(min_length=1, max_length=MAX_ITEMS)

    @model_validator(mode="after")
    def _one_partition(self) -> "NodeBatch[Item]":
        partitions = stream(self.TYPE).partitions
        home = partition_for(self.items[0].node, partitions)
        strays = [i.node for i in self.items if partition_for(i.node, partitions) != home]
        if strays:
            raise ValueError(f"nodes of another partition than {self.items[0].node!r}'s: {strays[:3]}")
        return self

    def event_key(self) -> str:
        return self.items[0].node
