"""`tidal fairshare trace` end to end: CSV in, CSV out, bad input → exit 2."""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tidal_scoring.cli_fairshare import main
from tidal_scoring.durations import parse_duration
from tidal_scoring.fairshare import decay
from conftest import patience

DAY = 86400


def write_usage(tmp_path: Path, text: str, name: str = "usage.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def trace(capsys, *argv: str) -> list[dict[str, float]]:
    assert main(list(argv)) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    reader = csv.DictReader(io.StringIO(out))
    assert reader.fieldnames == ["t", "usage", "score"]
    return [{k: float(v) for k, v in row.items()} for row in reader]


def row_at(rows: list[dict[str, float]], t: float) -> dict[str, float]:
    [row] = [r for r in rows if r["t"] == t]
    return row


@pytest.mark.parametrize("after_t, expected_pct", [(1, 36.8), (2, 13.5), (4, 1.8)])
def test_cli_tracking_error_after_step_up(tmp_path, capsys, after_t, expected_pct):
    # g = 1 from t = 0, score 0 at t = 0, T = 1 d, Δt = 60 s:
    # s(kT) = 1 − e^-k exactly → error e^-1, e^-2, e^-4.
    usage = write_usage(tmp_path, f"t,usage\n0,1\n{4 * DAY},1\n")
    rows = trace(capsys, "--adjust-time", "1d", "--period", "60", "--usage", str(usage))
    assert len(rows) == 4 * DAY // 60 + 1  # one row per period, both ends included
    row = row_at(rows, after_t * DAY)
    assert abs(row["score"] - row["usage"]) / 1.0 * 100 == pytest.approx(expected_pct, abs=0.5)


@pytest.mark.parametrize("after_t, expected_pct", [(1, 36.8), (2, 13.5), (4, 1.8)])
def test_cli_tracking_error_after_step_in_the_middle(tmp_path, capsys, after_t, expected_pct):
    # g = 0 for a day, then 400 (|step| = 400); T = 6 h, Δt = 1 min.
    # The update at the step instant already sees 400, so at step + kT the
    # error is e^-(k + 1/360): 36.7 %, 13.5 %, 1.8 %.
    step_at, T = DAY, 6 * 3600
    usage = write_usage(tmp_path, f"t,usage\n0,0\n{step_at},400\n{step_at + 4 * T},400\n")
    rows = trace(capsys, "--adjust-time", "6h", "--period", "1m", "--usage", str(usage))
    assert row_at(rows, step_at - 60)["score"] == 0.0  # nothing before the step
    row = row_at(rows, step_at + after_t * T)
    assert abs(row["score"] - 400) / 400 * 100 == pytest.approx(expected_pct, abs=0.5)


def test_cli_step_down_from_an_initial_score(tmp_path, capsys):
    # Converged at 5000, usage 2000 from t = 0; T = 2 h, Δt = 15 min.
    # After T: |s − 2000| / 3000 = e^-1 = 36.8 %.
    usage = write_usage(tmp_path, "t,usage\n0,2000\n28800,2000\n")
    rows = trace(capsys, "--adjust-time", "2h", "--period", "15m", "--usage", str(usage),
                 "--initial-score", "5000")
    assert rows[0] == {"t": 0.0, "usage": 2000.0, "score": 5000.0}
    assert abs(row_at(rows, 7200)["score"] - 2000) / 3000 * 100 == pytest.approx(36.8, abs=0.5)


def test_cli_scores_are_the_decay_function_row_by_row(tmp_path, capsys):
    # Step function 3 → 0 → 7 sampled every 90 s, T = 15 min.
    usage = write_usage(tmp_path, "t,usage\n100,3\n280,0\n500,7\n1000,7\n")
    rows = trace(capsys, "--adjust-time", "15m", "--period", "90s", "--usage", str(usage))
    assert [r["t"] for r in rows] == [100 + 90 * k for k in range(11)]  # 100 … 1000
    # usage held at each t: last row with row.t ≤ t
    # t:     100 190 280 370 460 550 … 1000
    assert [r["usage"] for r in rows] == [3, 3, 0, 0, 0, 7, 7, 7, 7, 7, 7]
    expected = 0.0
    for r in rows[1:]:
        expected = decay(expected, r["usage"], 90, 900)
        assert r["score"] == expected  # repr round-trips exactly


def test_cli_last_row_stops_at_the_last_t(tmp_path, capsys):
    # 0 … 250 by 100: rows at 0, 100, 200 (300 would pass the end)
    usage = write_usage(tmp_path, "t,usage\n0,1\n250,1\n")
    rows = trace(capsys, "--adjust-time", "1000", "--period", "100", "--usage", str(usage))
    assert [r["t"] for r in rows] == [0, 100, 200]


BAD_FILES = [
    ("no header", "0,1\n5,1\n", ":1: expected header 't,usage'"),
    ("empty", "", ":1: expected header 't,usage'"),
    ("no rows", "t,usage\n", "no data rows"),
    ("t not a number", "t,usage\n0,1\nabc,2\n", ":3: t is not a number: 'abc'"),
    ("usage not a number", "t,usage\n0,1\n5,lots\n", ":3: usage is not a number: 'lots'"),
    ("usage not finite", "t,usage\n0,nan\n", ":2: usage is not finite"),
    ("negative usage", "t,usage\n0,-1\n", ":2: usage must not be negative"),
    ("three fields", "t,usage\n0,1,2\n", ":2: expected 2 fields (t,usage), found 3"),
    ("t goes back", "t,usage\n0,1\n10,1\n10,2\n", ":4: t must increase, 10 follows 10"),
    ("field over csv's limit", "t,usage\n0," + "9" * 200_000 + "\n", "cannot read usage file: field larger"),
]


@pytest.mark.parametrize("what, text, message", BAD_FILES, ids=[case[0] for case in BAD_FILES])
def test_cli_bad_usage_file_exits_2_naming_file_and_line(tmp_path, capsys, what, text, message):
    usage = write_usage(tmp_path, text)
    assert main(["--adjust-time", "1d", "--period", "1h", "--usage", str(usage)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1  # one line
    assert captured.err.startswith(f"tidal fairshare trace: {usage}")
    assert message in captured.err


def test_cli_missing_file_exits_2(tmp_path, capsys):
    missing = tmp_path / "nope.csv"
    assert main(["--adjust-time", "1d", "--period", "1h", "--usage", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err and "cannot read usage file" in err


@pytest.mark.parametrize("argv, message", [
    (["--adjust-time", "soon", "--period", "1h"], "not a positive duration: 'soon'"),
    (["--adjust-time", "1d", "--period", "0"], "not a positive duration: '0'"),
    (["--adjust-time", "1d", "--period=-5m"], "not a positive duration: '-5m'"),
    (["--adjust-time", "1d"], "the following arguments are required: --period"),
    (["--adjust-time", "1d", "--period", "1h", "--bogus"], "unrecognized arguments: --bogus"),
    (["--adjust-time", "1d", "--period", "1h", "--initial-score", "-1"], "--initial-score must be"),
])
def test_cli_bad_arguments_exit_2(tmp_path, capsys, argv, message):
    usage = write_usage(tmp_path, "t,usage\n0,1\n")
    assert main([*argv, "--usage", str(usage)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("tidal fairshare trace: ") and err.count("\n") == 1


def test_cli_as_a_process_never_shows_a_traceback(tmp_path):
    usage = write_usage(tmp_path, "t,usage\n0,1\nx,2\n")
    done = subprocess.run([sys.executable, "-m", "tidal_scoring.cli_fairshare", "--adjust-time", "7d",
                           "--period", "1h", "--usage", str(usage)], capture_output=True, text=True, timeout=patience(60))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"tidal fairshare trace: {usage}:3: t is not a number: 'x'\n"


@pytest.mark.parametrize("text, seconds", [
    ("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("2h", 7200.0), ("7d", 604800.0),
    ("1.5h", 5400.0), ("1w", 604800.0), (" 3D ", 259200.0), ("0", 0.0),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-5", "5x", "1h30m", "nan", "inf", "1e3"])
def test_parse_duration_rejects(text):
    assert parse_duration(text) is None


def test_parse_duration_of_a_number_too_big_for_a_float_is_rejected():
    assert math.isinf(float("9" * 400))
    assert parse_duration("9" * 400) is None


def test_cli_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "--adjust-time" in capsys.readouterr().out


def test_cli_refuses_a_trace_of_more_than_a_million_rows(tmp_path, capsys):
    # 0 .. 1e18 s at 60 s a row would print for ever; the period is the mistake
    usage = write_usage(tmp_path, "t,usage\n0,1\n1e18,2\n")
    assert main(["--adjust-time", "1h", "--period", "60", "--usage", str(usage)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "more than 1,000,000 rows; use a longer --period" in captured.err
