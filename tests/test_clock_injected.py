"""No decision path reads the wall clock directly (issue 51): every module of
`services/` and `libs/` takes time from `tidal_clock`, the one module that
reads it, so a replay can hand a decision the time it was first made at."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# fully qualified names whose use reads the clock
READS = {f"time.{name}" for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
                                     "perf_counter_ns")}
READS |= {f"datetime.datetime.{name}" for name in ("now", "utcnow", "today")} | {"datetime.date.today"}


def qualified_names(tree: ast.AST) -> dict[str, str]:
    """What each imported local name stands for: `t` → `time`, `now` → `time.time`."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]  # `import a.b` binds `a`; `import a.b as c` binds `c` to `a.b`
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    """`dt.datetime.now` with `import datetime as dt` → `datetime.datetime.now`."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])


def clock_reads(path: Path) -> list[str]:
    """`file:line name` for each use of a clock read in `path`: a call, or the
    function handed on (`clock=time.time`), which is the same read deferred."""
    tree = ast.parse(path.read_text(), str(path))
    names = qualified_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Load):
            name = dotted(node, names)
            if name in READS:
                found.append(f"{path}:{node.lineno} {name}")
    return sorted(set(found))


def modules() -> list[Path]:
    return sorted(p for folder in ("services", "libs") for p in (ROOT / folder).rglob("*.py")
                  if not p.stem.endswith(("_pb2", "_pb2_grpc"))
                  and not p.is_relative_to(ROOT / "libs" / "tidal_clock"))


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_reads_the_clock_but_tidal_clock(path):
    found = clock_reads(path)
    assert not found, "read the time through tidal_clock (a Clock passed in, or elapsed()):\n" + "\n".join(found)


@pytest.mark.parametrize("source, name", [
    ("import time\ntime.time()\n", "time.time"),
    ("import time\ntime.monotonic()\n", "time.monotonic"),
    ("import time\ntime.perf_counter()\n", "time.perf_counter"),
    ("import time as t\nt.time()\n", "time.time"),
    ("from time import time, monotonic\nmonotonic()\n", "time.monotonic"),
    ("from time import time, monotonic\ntime()\n", "time.time"),
    ("from time import perf_counter as pc\npc()\n", "time.perf_counter"),
    ("import time\nclock = time.time\n", "time.time"),
    ("from datetime import datetime, timezone\ndatetime.now(timezone.utc)\n", "datetime.datetime.now"),
    ("from datetime import datetime\ndatetime.utcnow()\n", "datetime.datetime.utcnow"),
    ("from datetime import datetime\ndatetime.today()\n", "datetime.datetime.today"),
    ("from datetime import date\ndate.today()\n", "datetime.date.today"),
    ("from datetime import datetime as DT\nDT.now()\n", "datetime.datetime.now"),
    ("import datetime\ndatetime.datetime.now()\n", "datetime.datetime.now"),
    ("import datetime as dt\ndt.datetime.now()\n", "datetime.datetime.now"),
    ("import datetime as dt\ndt.date.today()\n", "datetime.date.today"),
    ("def f():\n    import time\n    return time.time()\n", "time.time"),
    ("import os.path, time as clock\nclock.monotonic()\n", "time.monotonic"),
])
def test_the_checker_sees_each_form_of_a_clock_read(tmp_path, source, name):
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    assert [found.split(" ", 1)[1] for found in clock_reads(bad)] == [name]


def test_the_checker_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import time\n\n\nstarted = time.monotonic()\n")
    assert clock_reads(bad) == [f"{bad}:4 time.monotonic"]


def test_the_checker_passes_tidal_clock_and_other_uses_of_time(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(
        "import time\n"
        "from datetime import datetime, timedelta, timezone\n"
        "from tidal_clock import Clock, ReplayClock, elapsed, now_utc, wall_clock\n"
        "def decide(clock: Clock = wall_clock):\n"
        "    at = now_utc(clock) - timedelta(seconds=5)\n"
        "    started = elapsed()\n"
        "    time.sleep(0)\n"
        "    return datetime.fromtimestamp(clock(), timezone.utc), at, started, ReplayClock(3.0)()\n"
        "class Service:\n"
        "    def __init__(self, clock: Clock = wall_clock):\n"
        "        self.clock = clock\n"
        "    def time(self):\n"
        "        return self.clock()\n"
        "Service().time()\n")
    assert clock_reads(good) == []
