"""Kubernetes resource quantities (`500m`, `2`, `1Gi`, `512Mi`, `1G`, `1e3`)
in Tidal's units: milli-CPU and MiB.

The syntax and the exact value are `tidal_kube.quantity`'s (shared with the
admission webhook, which writes them). Here: the units, rounded *up*, as
the API server rounds requests up (`MilliValue`), so a request is never
under-counted: `0.1m` CPU → 1 milli-CPU, `1G` → 954 MiB; and bounds, so
that no value makes an event unpublishable: a result (milli-CPU, MiB,
count) that fits in 64 bits. A JSON number is read as its text.

Pods ask a few distinct quantities, each read on every watch event: the
conversions remember the last `CACHED` texts they read (by type and text, so
`True`, `1` and `1.0` stay apart; errors are not remembered).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from tidal_kube.quantity import MAX_TEXT, QuantityError, parse, shown

__all__ = ["MAX_RESULT", "MAX_TEXT", "QuantityError", "count", "cpu_milli", "memory_mib", "parse_quantity"]

MIB = 1 << 20
MAX_RESULT = 2**63 - 1  # what an event's integers hold (tidal_schemas.common.MAX_INT)
CACHED = 1024  # distinct quantity texts each conversion remembers


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity: number × 1024^k, × 1000^k or × 10^e."""
    if isinstance(text, bool):
        raise QuantityError(f"{shown(text)} is not a Kubernetes quantity")
    if isinstance(text, int) and abs(text) > MAX_RESULT:
        raise QuantityError(f"{shown(str(text))} is too large")
    return parse(str(text) if isinstance(text, (int, float)) else text)


def _bounded(value: Fraction, text: object) -> int:
    result = math.ceil(value)
    if result > MAX_RESULT:
        raise QuantityError(f"{shown(text)} is too large")
    return result


def _remembered(convert):
    """`convert`, remembering its results for texts it can hash (str, int, float)."""
    cached = lru_cache(maxsize=CACHED, typed=True)(convert)

    def read(text: str | int | float) -> int:
        return cached(text) if isinstance(text, (str, int, float)) else convert(text)

    read.__doc__, read.__name__ = convert.__doc__, convert.__name__
    return read


@_remembered
def cpu_milli(text: str | int | float) -> int:
    """CPU quantity → milli-CPU, rounded up: ceil(value × 1000)."""
    return _bounded(parse_quantity(text) * 1000, text)


@_remembered
def memory_mib(text: str | int | float) -> int:
    """Memory quantity (bytes) → MiB, rounded up: ceil(value / 2^20)."""
    return _bounded(parse_quantity(text) / MIB, text)


@_remembered
def count(text: str | int | float) -> int:
    """An extended-resource count such as `nvidia.com/gpu: 2`, rounded up."""
    return _bounded(parse_quantity(text), text)
