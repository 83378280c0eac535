"""An event holding many items of one kind (the node figures of a
partition, a scheduling cycle's decisions): every event costs its
producer, the broker and each reader far more than an item's few hundred
bytes. Version 1 of such a stream carried one item as the payload itself;
such an event reads as a batch of one."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from pydantic import model_validator

from .envelope import Payload

Item = TypeVar("Item")


class ItemBatch(Payload, Generic[Item]):
    """`items` (declared by each kind, with its bounds), in order."""

    ONE_ITEM_FIELD: ClassVar[str]  # a field every item has: it marks a version-1 payload, one item itself
    items: list[Item]

    @model_validator(mode="before")
    @classmethod
    def _one_item(cls, data: Any) -> Any:
        if isinstance(data, dict) and "items" not in data and cls.ONE_ITEM_FIELD in data:
            return {"items": [data]}  # version 1: the item itself
        return data

    @classmethod
    def of(cls, *items: Item) -> "ItemBatch[Item]":
        return cls(items=list(items))
