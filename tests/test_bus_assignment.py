"""Which member owns which partition: bounded-load rendezvous hashing, the
one rule of the NATS membership and the Kafka assignor (pure)."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from tidal_bus.membership import assignment, partition_owners


@pytest.mark.parametrize("members", [1, 2, 3, 4, 5, 8, 9])
def test_every_partition_has_one_owner_and_nobody_holds_more_than_a_share(members):
    for trial in range(200):
        ids = [uuid.uuid4().hex for _ in range(members)]
        owners = partition_owners(range(8), ids)
        assert sorted(owners) == list(range(8))
        load = Counter(owners.values())
        assert max(load.values()) <= -(-8 // members) and min(load[m] for m in ids) >= 8 // members
        # with no more members than partitions, nobody sits idle (plain rendezvous left one of 4 idle)
        assert len(load) == min(members, 8)


def test_every_member_computes_the_same_split():
    ids = [uuid.uuid4().hex for _ in range(3)]
    mine = {m: assignment(m, ids, 8) for m in ids}
    shuffled = list(reversed(ids))
    assert {m: assignment(m, shuffled, 8) for m in ids} == mine
    assert set().union(*mine.values()) == set(range(8)) and sum(map(len, mine.values())) == 8
    assert assignment("not-a-member", ids, 8) == frozenset()


def test_a_member_that_leaves_moves_mostly_its_own_partitions():
    moved_others = 0
    for trial in range(300):
        ids = [uuid.uuid4().hex for _ in range(4)]
        before, after = partition_owners(range(8), ids), partition_owners(range(8), ids[:3])
        # every partition of the one that left finds a new owner among the rest
        assert all(after[p] in ids[:3] for p, owner in before.items() if owner == ids[3])
        moved_others += sum(1 for p in range(8) if before[p] != ids[3] and after[p] != before[p])
    # rebalancing to 3/3/2 moves about one other partition per leave, not the whole stream
    assert moved_others / 300 < 1.5
