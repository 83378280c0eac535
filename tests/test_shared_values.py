"""`tidal_runtime.SharedValues`: one object for every equal value, in a bounded table."""

from __future__ import annotations

from tidal_runtime import SharedValues


def test_equal_values_are_one_object_and_the_table_is_bounded():
    shared = SharedValues(limit=3)
    first = shared.same((1, "a") + ())
    assert shared.same(tuple([1, "a"])) is first  # an equal value made apart gives the kept one
    made = []
    assert shared.get("k", lambda: made.append(1) or ["x"]) is shared.get("k", lambda: made.append(2) or ["y"])
    assert made == [1] and len(shared) == 2  # made once
    shared.same(3.5)
    assert len(shared) == 3
    shared.same("fourth")  # past the limit: the table starts afresh
    assert len(shared) == 1 and first == (1, "a")  # and what was shared before stays valid
    assert shared.same(tuple([1, "a"])) is not first  # no longer shared with the new ones
