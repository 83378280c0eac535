"""Fair-share decay, first-run and restart rules, and the score book (SPEC §C)."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone

import pytest

from tidal_scoring.fairshare import (
    DEFAULT_ADJUST_TIME_S,
    FairShareBook,
    RunningPod,
    ScoreRecord,
    adjust_time_from_settle_time,
    catch_up,
    decay,
    first_run_scores,
    initial_score,
    run_times_by_resource_type,
    usage_by_resource_type,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAY = 86400.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def run(score: float, usage: float, steps: int, dt_s: float, adjust_time_s: float) -> float:
    for _ in range(steps):
        score = decay(score, usage, dt_s, adjust_time_s)
    return score


# --- decay: tracking error after a step change (the seed's 37 % / 14 % / 2 %)

@pytest.mark.parametrize("period_s", [60.0, 3600.0, DAY / 10])
@pytest.mark.parametrize("after_t, expected_pct", [
    (1, 36.8),  # e^-1 = 0.3679
    (2, 13.5),  # e^-2 = 0.1353
    (4, 1.8),   # e^-4 = 0.0183
])
def test_tracking_error_after_step_up(period_s, after_t, expected_pct):
    T = DAY
    steps = round(after_t * T / period_s)
    s = run(0.0, 1.0, steps, period_s, T)  # g steps 0 → 1, s starts at 0
    error_pct = abs(s - 1.0) / 1.0 * 100
    assert error_pct == pytest.approx(expected_pct, abs=0.5)


@pytest.mark.parametrize("after_t, expected_pct", [(1, 36.8), (2, 13.5), (4, 1.8)])
def test_tracking_error_after_step_down_is_relative_to_the_step(after_t, expected_pct):
    # Converged at g = 5000, g drops to 2000: |step| = 3000.
    T, period = 7 * DAY / 4, 600.0
    s = run(5000.0, 2000.0, round(after_t * T / period), period, T)
    assert abs(s - 2000.0) / 3000.0 * 100 == pytest.approx(expected_pct, abs=0.5)


def test_decay_is_exact_for_constant_usage_whatever_the_period():
    # One step of 2T equals 48 steps of T/24 when g is constant:
    # 10·e^-2 + 4·(1 − e^-2) = 1.3534 + 3.4587 = 4.8120
    T = DAY
    one = decay(10.0, 4.0, 2 * T, T)
    many = run(10.0, 4.0, 48, T / 24, T)
    assert one == pytest.approx(4.8120, abs=1e-4)
    assert many == pytest.approx(one, rel=1e-12)


@pytest.mark.parametrize("score, usage, dt, expected", [
    (7.0, 3.0, 0.0, 7.0),                                    # Δt = 0: unchanged
    (0.0, 1000.0, DAY, 1000 * (1 - math.exp(-1))),           # 632.12
    (500.0, 0.0, DAY, 500 * math.exp(-1)),                   # 183.94: decays toward 0
    (200.0, 200.0, 3 * DAY, 200.0),                          # at g already: stays
])
def test_decay_table(score, usage, dt, expected):
    assert decay(score, usage, dt, DAY) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("dt, T", [(-1.0, DAY), (1.0, 0.0), (1.0, -5.0)])
def test_decay_rejects_impossible_arguments(dt, T):
    with pytest.raises(ValueError):
        decay(1.0, 1.0, dt, T)


def test_settle_time_default_is_a_week_and_T_a_quarter_of_it():
    # 4T = 7 d → T = 1.75 d = 151 200 s
    assert DEFAULT_ADJUST_TIME_S == 151_200.0
    assert adjust_time_from_settle_time(4 * 3600.0) == 3600.0
    with pytest.raises(ValueError):
        adjust_time_from_settle_time(0.0)


# --- first run and restart

def test_initial_score_sums_each_pods_share():
    # T = 1 d:
    #   1000 for T   → 1000·(1 − e^-1) = 632.121
    #   2000 for 0 s → 0
    #    500 for 2T  →  500·(1 − e^-2) = 432.332
    # total 1064.453
    pods = [(1000.0, DAY), (2000.0, 0.0), (500.0, 2 * DAY)]
    assert initial_score(pods, DAY) == pytest.approx(1064.453, abs=1e-3)


def test_initial_score_of_nothing_is_zero():
    assert initial_score([], DAY) == 0.0


def test_initial_score_equals_tracking_the_pod_since_it_started():
    # A pod of 800 running 5 h: first-run share == decay from 0 over 5 h.
    assert initial_score([(800.0, 5 * 3600.0)], DAY) == pytest.approx(decay(0.0, 800.0, 5 * 3600.0, DAY))


@pytest.mark.parametrize("score, usage, gap_s, expected", [
    (100.0, 0.0, DAY, 36.788),         # 100·e^-1
    (100.0, 300.0, 2 * DAY, 272.933),  # 100·e^-2 + 300·(1 − e^-2) = 13.534 + 259.399
    (100.0, 300.0, 0.0, 100.0),        # restarted at once: nothing elapsed
    (100.0, 300.0, -60.0, 100.0),      # now before the last update: Δt = 0
])
def test_catch_up_after_restart(score, usage, gap_s, expected):
    assert catch_up(score, usage, at(0), at(gap_s), DAY) == pytest.approx(expected, abs=1e-3)


# --- usage per resource type

def test_usage_by_resource_type_groups_by_user_and_gpu_model_and_all_gpus():
    pods = [
        RunningPod("alice", cpu_milli=2000, memory_mib=4096, gpus={"A100": 2000}),
        RunningPod("alice", cpu_milli=500, memory_mib=1024, gpus={"A100": 500}),
        RunningPod("alice", cpu_milli=1000, memory_mib=0, gpus={"T4": 1000}),
        RunningPod("bob", cpu_milli=0, memory_mib=512),
        RunningPod("bob", gpus={"T4": 0}),  # a model but no share: no GPU usage
    ]
    assert usage_by_resource_type(pods) == {
        ("alice", "A100"): 2500.0,     # 2000 + 500 milli-GPU
        ("alice", "T4"): 1000.0,
        ("alice", "gpu"): 3500.0,      # every model together: 2500 + 1000
        ("alice", "cpu"): 3500.0,      # 2000 + 500 + 1000
        ("alice", "memory"): 5120.0,   # 4096 + 1024
        ("bob", "memory"): 512.0,      # bob's zero CPU is left out
    }


def test_run_times_by_resource_type_uses_pod_start():
    pods = [RunningPod("alice", cpu_milli=1000, started_at=at(0)),
            RunningPod("alice", cpu_milli=500, started_at=None)]
    assert run_times_by_resource_type(pods, at(3600)) == {("alice", "cpu"): [(1000.0, 3600.0), (500.0, 0.0)]}


def test_first_run_scores_are_each_keys_initial_score_in_any_order():
    rng = random.Random(7)
    pods = [RunningPod(rng.choice(["alice", "bob", "carol"]), cpu_milli=rng.randrange(1, 64_000),
                       memory_mib=rng.randrange(0, 4096), gpus=rng.choice([{}, {"A100": 500}, {"T4": 1000}]),
                       started_at=None if rng.random() < 0.1 else at(-rng.uniform(0, 30 * DAY)))
            for _ in range(2_000)]
    expected = {key: initial_score(runs, DAY) for key, runs in run_times_by_resource_type(pods, at(0)).items()}
    assert set(expected) >= {("alice", "gpu"), ("bob", "A100"), ("carol", "memory")}
    for _ in range(3):
        rng.shuffle(pods)
        assert first_run_scores(pods, at(0), DAY) == expected  # exactly, not within rounding


# --- the book

def test_book_first_run_uses_pods_run_times():
    # alice's A100 pod has run T = 1 d: 1000·(1 − e^-1) = 632.12
    book = FairShareBook(adjust_time_s=DAY)
    pods = [RunningPod("alice", gpus={"A100": 1000}, started_at=at(0))]
    scores = {(s.user, s.resource_type): s for s in book.advance_running(at(DAY), pods)}
    assert scores[("alice", "A100")].score == pytest.approx(632.12, abs=0.01)
    assert scores[("alice", "A100")].usage == 1000.0
    assert scores[("alice", "A100")].adjust_time_s == DAY
    assert scores[("alice", "A100")].updated_at == at(DAY)


def test_book_new_key_without_history_starts_at_zero():
    book = FairShareBook(adjust_time_s=DAY)
    [score] = book.advance(at(0), {("bob", "cpu"): 2000.0})
    assert (score.user, score.resource_type, score.score, score.usage) == ("bob", "cpu", 0.0, 2000.0)


def test_book_periodic_updates_follow_decay():
    # One hour steps at constant 1000: s after 24 h = 1000·(1 − e^-1) = 632.12
    book = FairShareBook(adjust_time_s=DAY)
    book.advance(at(0), {("alice", "cpu"): 1000.0})
    for hour in range(1, 25):
        book.advance(at(hour * 3600), {("alice", "cpu"): 1000.0})
    assert book.get("alice", "cpu").score == pytest.approx(632.12, abs=0.01)


def test_book_keys_without_usage_decay_then_are_dropped():
    book = FairShareBook(adjust_time_s=DAY, prune_below=1.0)
    book.restore("carol", "T4", ScoreRecord(score=100.0, usage=1000.0, updated_at=at(0)))
    [after_1t] = book.advance(at(DAY), {})
    assert after_1t.score == pytest.approx(36.788, abs=1e-3)  # 100·e^-1, usage now 0
    assert after_1t.usage == 0.0
    # 100·e^-5 = 0.674 < prune_below 1.0: gone, nothing published
    assert book.advance(at(5 * DAY), {}) == []
    assert book.get("carol", "T4") is None


def test_book_restore_then_advance_is_the_restart_rule():
    book = FairShareBook(adjust_time_s=DAY)
    book.restore("alice", "cpu", ScoreRecord(score=100.0, usage=300.0, updated_at=at(0)))
    [score] = book.advance(at(2 * DAY), {("alice", "cpu"): 300.0})
    assert score.score == pytest.approx(272.933, abs=1e-3)  # as in test_catch_up_after_restart


def test_book_late_time_does_not_move_a_record_back():
    book = FairShareBook(adjust_time_s=DAY)
    book.restore("alice", "cpu", ScoreRecord(score=50.0, usage=10.0, updated_at=at(100)))
    [score] = book.advance(at(40), {("alice", "cpu"): 10.0})
    assert score.score == 50.0  # Δt clamped to 0
    assert book.get("alice", "cpu").updated_at == at(100)


def test_two_replicas_fed_the_same_events_agree_exactly():
    events = [
        (at(0), [RunningPod("alice", cpu_milli=1000, started_at=at(-7200)),
                 RunningPod("bob", gpus={"A100": 500}, started_at=at(-60))]),
        (at(600), [RunningPod("alice", cpu_milli=3000, started_at=at(-7200))]),
        (at(1800), [RunningPod("bob", memory_mib=2048, started_at=at(1500))]),
    ]
    one, two = FairShareBook(adjust_time_s=DAY), FairShareBook(adjust_time_s=DAY)
    for now, pods in events:
        out_one = one.advance_running(now, pods)
        out_two = two.advance_running(now, list(reversed(pods)))  # arrival order must not matter
        assert out_one == out_two
    assert one.records() == two.records()
    assert [(s.user, s.resource_type) for s in out_one] == sorted((s.user, s.resource_type) for s in out_one)


def test_book_rebuilt_from_its_published_scores_continues_identically():
    # A replica that restarts and replays score.user continues exactly where
    # the one that kept running is.
    running = FairShareBook(adjust_time_s=DAY)
    running.advance(at(0), {("alice", "cpu"): 1000.0, ("bob", "A100"): 500.0})
    published = running.advance(at(3600), {("alice", "cpu"): 1000.0, ("bob", "A100"): 500.0})
    restarted = FairShareBook(adjust_time_s=DAY)
    for score in published:
        restarted.restore_published(score)
    later = {("alice", "cpu"): 2000.0}
    assert restarted.advance(at(7 * 3600), later) == running.advance(at(7 * 3600), later)
