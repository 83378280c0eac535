"""Per-node figures of one stream partition, published as one event: a
stage answering every node's sample (scoring's scores, oversell's
allocatable) sends one event for the samples it has in hand, not one each.
Every event costs its producer, the broker and each reader far more than
its few hundred bytes (`tidal_runtime.output_batches` sends them).

An event is keyed by its first node, and every node in it belongs to that
key's partition of the stream, so a reader owning the partition owns every
node in it. Version 1 of these streams carried one node's figures as the
payload itself; such an event reads as a batch of one.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import Field, model_validator

from .envelope import Payload
from .streams import partition_for, stream

MAX_ITEMS = 256  # per event: well under the broker's message limit at a few hundred bytes each


Item = TypeVar("Item")  # a record with a `node`


class NodeBatch(Payload, Generic[Item]):
    """`items`: one partition's nodes' figures, in sample order."""

    items: list[Item] = Field(min_length=1, max_length=MAX_ITEMS)

    @model_validator(mode="before")
    @classmethod
    def _one_node(cls, data: Any) -> Any:
        if isinstance(data, dict) and "items" not in data and "node" in data:
            return {"items": [data]}  # version 1: the figures themselves
        return data

    @model_validator(mode="after")
    def _one_partition(self) -> "NodeBatch[Item]":
        partitions = stream(self.TYPE).partitions
        home = partition_for(self.items[0].node, partitions)
        strays = [i.node for i in self.items if partition_for(i.node, partitions) != home]
        if strays:
            raise ValueError(f"nodes of another partition than {self.items[0].node!r}'s: {strays[:3]}")
        return self

    @classmethod
    def of(cls, *items: Item) -> "NodeBatch[Item]":
        return cls(items=list(items))

    def event_key(self) -> str:
        return self.items[0].node
