"""The C allocator's heap, set for a process that builds large numpy arrays
for a moment: a service, or a benchmark's stand-in for one.

glibc hands the top of its heap back to the system once enough of it is
free there, and takes it again, a page fault a page, when the next large
allocation grows the heap. A vectorised scoring of a few hundred node states
makes temporaries of some 100 KiB and frees them together, so it paid that
on every call: `FragModel.share_after` took 233 µs a call against 180 with
the top padded, and a decision's p99 was 0.95 ms against 0.65 with 2,729 pod
shapes (`bench/placement_policy.py --nodes 5000 --pods 20000 --cpu-values
296`, 5,349 against 5,586 pods/s; with the bench's 56 shapes no difference
the noise shows, nor in the 20,000-pod burst's resident memory). `M_TOP_PAD`
keeps that much more at the top whenever the heap grows or shrinks."""

from __future__ import annotations

import ctypes

M_TOP_PAD = -2  # glibc's <malloc.h>
TOP_PAD = 8 << 20


def pad_heap_top(pad: int = TOP_PAD) -> bool:
    """Keep `pad` bytes at the top of glibc's heap as it grows and shrinks;
    False where the C library cannot (no `mallopt`, as on macOS; musl's
    ignores it). Process-wide: called by a process's entry point."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_TOP_PAD, pad) == 1
