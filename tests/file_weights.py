"""Which test files run first on the workers: the longest first, so no long
file starts last and keeps one worker busy after the others are done (xdist
hands out whole files with `--dist loadfile`; `--no-loadscope-reorder` keeps
this order instead of xdist's, which is by number of tests).

The weights are seconds per file from one `make test` run (3 workers);
only their order matters, and a file not listed runs after the listed ones.
Refresh after a run with a JUnit report:

    .venv/bin/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder --junitxml=/tmp/junit.xml
    .venv/bin/python tests/file_weights.py /tmp/junit.xml > tests/file_weights.json
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

WEIGHTS = Path(__file__).with_name("file_weights.json")


def weights() -> dict[str, float]:
    return json.loads(WEIGHTS.read_text()) if WEIGHTS.exists() else {}


def from_junit(path: str) -> dict[str, float]:
    seconds: Counter[str] = Counter()
    for case in ET.parse(path).iter("testcase"):
        module = (case.get("classname") or "").split(".")
        if len(module) > 1:
            seconds[f"{module[1]}.py"] += float(case.get("time") or 0)
    return {name: round(s, 1) for name, s in seconds.most_common() if s >= 1.0}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: file_weights.py JUNIT_XML")
    print(json.dumps(from_junit(sys.argv[1]), indent=0))
