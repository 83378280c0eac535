"""Where benchmarks find their data: inside this repository, so a fresh
clone reproduces every figure (the openb trace ships under data/openb)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OPENB = REPO / "data" / "openb"
