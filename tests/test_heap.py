"""A service process's C heap (tidal_runtime.heap): with its top padded, a
call whose numpy temporaries are alive together and freed together no
longer hands the heap's top back to the system and faults it in again.
The setting is process-wide, so each case runs in a process of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tidal_runtime import heap

FAULTS = """
import resource, sys
import numpy as np
from tidal_runtime import pad_heap_top

if PADDED and not pad_heap_top():
    print("unsupported")
    sys.exit()
kept = [np.ones(1000) for _ in range(100)]  # some of the heap in use below
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    temporaries = [np.ones((200, 8, 7)) for _ in range(10)]  # a vectorised scoring's, about 90 KiB each
    del temporaries
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(padded: bool) -> str:
    code = f"PADDED = {padded}\n" + textwrap.dedent(FAULTS)
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def test_a_padded_heap_top_is_not_faulted_in_again_call_after_call():
    padded = page_faults(True)
    if padded == "unsupported":
        pytest.skip("this C library has no mallopt")
    plain = int(page_faults(False))
    assert plain > 10_000  # each call faulted its temporaries' pages in again (33,054 on glibc 2.36)
    assert int(padded) < plain / 10  # 219 there


def test_without_mallopt_the_heap_is_left_as_it_is(monkeypatch):
    class NoMallopt:
        def __init__(self, name):
            pass

    monkeypatch.setattr(heap.ctypes, "CDLL", NoMallopt)
    assert heap.pad_heap_top() is False
