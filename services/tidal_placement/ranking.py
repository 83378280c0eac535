"""Choosing among the candidates that passed the filters (`decide`'s step
2): the lexicographic minimum of their ranking keys, and the runners-up a
decision explains itself with.

Keys come per candidate, or per node state (`StateScores`) when a score
cache answers. Per state, the cost and tiebreaks are compared over the
distinct states among the candidates — hundreds where the candidates are
thousands — and only the tied states' rows go on to the §E NUMA key; when
every key is a whole number (FGD's integer score and its tiebreaks), the
cache hands them over packed into one integer per candidate (`pack_keys`),
and one minimum over the candidates finds the ties. The values compared
are the same either way, so the ties and the choice are too
(`tests/test_placement_score_cache.py` compares every decision, its
runners-up included, with the plain strategy's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .gpu_candidates import StateScores

RUNNERS_UP = 3
PREFIX = 256  # candidates looked at first for the runners-up's few rows

Ranked = tuple[tuple[int, float], ...]  # (candidate, its first key's value), best first


def select(k: int, keys: list[np.ndarray], numa_key: Callable[[np.ndarray], np.ndarray],
           rng: np.random.Generator | None, rank: np.ndarray | None, ranking: list[np.ndarray] | None = None,
           tied: np.ndarray | None = None, numa_least: Callable[[np.ndarray], np.ndarray] | None = None) -> int:
    """The candidate (of `k`) with the least keys, compared in order, then
    the NUMA key of those still tied; final ties to the least `rank`, or
    at random with `rng`, else the first. Narrows from the candidates
    `tied` when given (all otherwise); leaves in `ranking` the first key
    per candidate and the candidates at its least. `numa_least`, when
    given, names the positions at the least NUMA key without every value
    (used unless `ranking` wants the NUMA key's values)."""
    if k == 1:
        return 0
    idx = tied
    if idx is not None and len(idx) == 1:
        return int(idx[0])
    for key in [*keys, None]:  # lexicographic minimum without sorting: narrow the ties key by key
        if key is None:
            among = np.arange(k) if idx is None else idx
            if numa_least is not None and not (idx is None and ranking is not None):
                idx = among[numa_least(among)]
                if len(idx) == 1:
                    return int(idx[0])
                break
            values = numa_key(among)
        else:
            values = key if idx is None else key[idx]
        at_least = least(values).nonzero()[0]
        if idx is None and ranking is not None:
            ranking += [values, at_least]
        idx = at_least if idx is None else idx[at_least]
        if len(idx) == 1:
            return int(idx[0])
    if rng is not None:
        return int(idx[rng.integers(len(idx))])
    return int(idx[np.argmin(rank[idx])]) if rank is not None else int(idx[0])


def least(values: np.ndarray) -> np.ndarray:
    """Which values are the least, within rounding."""
    return least_to(values, values.min())


def least_to(values: np.ndarray, best: float) -> np.ndarray:
    """Which values are no more than `best`, within rounding."""
    return values <= best + 1e-9 * max(1.0, abs(float(best)))


def pack_keys(keys: Sequence[np.ndarray | list[float]]) -> np.ndarray | None:
    """Keys compared in turn (one value each per state or candidate; arrays,
    or lists as `score_few` gives them) as one integer ≥ 0 each, ordered
    alike and equal exactly where `least` ties every key; None when some
    value is not a whole number or too large for its share of 62 bits (at
    most 30: then `least`'s rounding, under one part in a billion, cannot
    tie two whole numbers that differ)."""
    bits = min(62 // max(len(keys), 1), 30)
    if len(keys[0]) <= FEW_PACKED:
        packed = _pack_plain([key if isinstance(key, list) else key.tolist() for key in keys], bits)
        return None if packed is None else np.array(packed, dtype=np.int64)
    return _pack_arrays([np.asarray(key, dtype=np.float64) for key in keys], bits)


FEW_PACKED = 32  # values per key packed in plain Python (numpy's per-call cost is most of the work on a few)


def _pack_plain(keys: list[list[float]], bits: int) -> list[int] | None:
    half, out = 1 << (bits - 1), []
    for values in zip(*keys):
        packed = 0
        for value in values:
            if not (float(value).is_integer() and -half <= value < half):  # NaN and ±inf are not integers
                return None
            packed = (packed << bits) | (int(value) + half)
        out.append(packed)
    return out


def _pack_arrays(keys: Sequence[np.ndarray], bits: int) -> np.ndarray | None:
    half, packed = 1 << (bits - 1), None
    for key in keys:
        if not np.isfinite(key).all():
            return None
        whole = key.astype(np.int64)
        if not (whole == key).all() or (whole.size and not -half <= int(whole.min()) <= int(whole.max()) < half):
            return None
        packed = whole + half if packed is None else (packed << bits) | (whole + half)
    return packed


def tied_states(scores: StateScores) -> tuple[np.ndarray, np.ndarray | None]:
    """The candidates whose states tie on the cost and every tiebreak, and
    the states at the least cost (`runners_up_of_states` starts from them;
    None when the keys came packed, which find them faster)."""
    if scores.packed is not None:
        packed = scores.packed
        return (packed == packed.min()).nonzero()[0], None
    ids = scores.states()
    ids = cheapest = ids[least(scores.cost[ids])]
    for key in scores.tiebreaks:
        if len(ids) == 1:
            break
        ids = ids[least(key[ids])]
    return _rows_in(scores, ids), cheapest


def runners_up(values: np.ndarray, at_least: np.ndarray, chosen: int) -> Ranked:
    """The best candidates but `chosen` by their first key `values`, equal
    values in candidate order. `at_least`: the candidates within rounding
    of the least value; when enough of them hold exactly one value they
    are the answer, without a pass over every candidate."""
    if len(values) <= 1:
        return ()
    take = min(RUNNERS_UP + 1, len(values))
    if len(at_least) >= take and values[at_least[0]] == values[at_least].max():
        best = at_least[:take]
    else:
        edge = np.partition(values, take - 1)[take - 1]  # the take-th least value
        best = (values < edge).nonzero()[0]
        best = np.concatenate([best, (values == edge).nonzero()[0][:take - len(best)]])
        best = best[np.lexsort((best, values[best]))]
    return tuple((int(j), float(values[j])) for j in best if j != chosen)[:RUNNERS_UP]


def runners_up_of_states(scores: StateScores, chosen: int, cheapest: np.ndarray | None = None) -> Ranked:
    """`runners_up` by the cost per state: the rows of the states at the
    least cost (`cheapest`, if known), when enough, without the cost of
    every candidate."""
    if len(scores.sids) > 1:
        take = min(RUNNERS_UP + 1, len(scores.sids))
        if scores.packed is not None:  # whole-number costs: the least is the least packed key's, exactly
            best = scores.cost[scores.sids[int(scores.packed.argmin())]]
            rows = _first_rows(lambda sids: scores.cost[sids] == best, scores.sids, take)
            if len(rows) >= take:
                return tuple((int(j), float(best)) for j in rows if j != chosen)[:RUNNERS_UP]
        else:
            if cheapest is None:
                ids = scores.states()
                cheapest = ids[least(scores.cost[ids])]
            rows = _rows_in(scores, cheapest, first=take)
            if len(rows) >= take and scores.cost[cheapest].max() == scores.cost[scores.sids[rows[0]]]:
                return tuple((int(j), float(scores.cost[scores.sids[j]])) for j in rows if j != chosen)[:RUNNERS_UP]
    values = scores.cost[scores.sids]
    return runners_up(values, least(values).nonzero()[0], chosen)


def _rows_in(scores: StateScores, ids: np.ndarray, first: int | None = None) -> np.ndarray:
    # the candidates in states `ids`, in candidate order (the `first` of them only,
    # found in a short prefix of the candidates when that holds enough)
    if len(ids) == 1:  # one state: a comparison, not a table of every state
        sid = ids[0]
        member = lambda sids: sids == sid  # noqa: E731
    else:
        chosen = np.zeros(len(scores.cost), dtype=bool)
        chosen[ids] = True
        member = chosen.__getitem__
    if first is not None:
        return _first_rows(member, scores.sids, first)
    return member(scores.sids).nonzero()[0]


def _first_rows(member: Callable[[np.ndarray], np.ndarray], sids: np.ndarray, first: int) -> np.ndarray:
    # the first `first` candidates whose states are `member`s, found in a short
    # prefix of the candidates when that holds enough
    head = member(sids[:PREFIX]).nonzero()[0]
    return head[:first] if len(head) >= first else member(sids).nonzero()[0][:first]
