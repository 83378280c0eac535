"""Lists in pages, as the API server serves `limit` and `continue`.

A list asked with `limit` holds at most that many items, in key order
(namespace/name), and `metadata.continue` (with `remainingItemCount`)
while items remain. Every page of one list is of the same snapshot, at the
first page's resourceVersion, as etcd serves it. A `continue` token whose
snapshot is no longer kept is answered 410 Expired, as a compacted one is;
the client then lists again from the start. A token that does not decode
is a 400.
"""

from __future__ import annotations

import base64
import json
from collections import OrderedDict
from typing import Any

KEPT_LISTS = 16  # snapshots of lists being paged, the oldest forgotten first


class ContinueError(Exception):
    """The `continue` token cannot be served: `code` 410 (expired) or 400."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Pages:
    def __init__(self, kept: int = KEPT_LISTS) -> None:
        self.kept = kept
        self._lists: OrderedDict[int, list[Any]] = OrderedDict()  # snapshot id -> its items
        self._next_id = 0

    def page(self, items: list[Any], rv: str, limit: int, token: str | None) -> tuple[list[Any], dict[str, Any]]:
        """The page `token` asks for (the first when None) of `items` (the
        list now, in key order; not read for a continued page), of up to
        `limit` items (0: the rest), and the list metadata to answer with."""
        if token:
            snapshot, start, rv = self._resume(token)
            items = self._lists[snapshot]
        else:
            snapshot, start = self._keep(items), 0
        end = start + limit if limit > 0 else len(items)
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if end < len(items):
            metadata["continue"] = _encode({"snapshot": snapshot, "start": end, "rv": rv})
            metadata["remainingItemCount"] = len(items) - end
        else:
            self._lists.pop(snapshot, None)
        return items[start:end], metadata

    def _keep(self, items: list[Any]) -> int:
        self._next_id += 1
        self._lists[self._next_id] = items
        while len(self._lists) > self.kept:
            self._lists.popitem(last=False)
        return self._next_id

    def _resume(self, token: str) -> tuple[int, int, str]:
        try:
            found = json.loads(base64.urlsafe_b64decode(token.encode()))
            snapshot, start, rv = int(found["snapshot"]), int(found["start"]), str(found["rv"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ContinueError(400, f"continue key is not valid: {exc}") from None
        if snapshot not in self._lists:
            raise ContinueError(410, "The provided continue parameter is too old to display a consistent list "
                                     "result. You can start a new list without the continue parameter.")
        return snapshot, start, rv


def _encode(found: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(found).encode()).decode()
