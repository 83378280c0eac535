"""Kubernetes resource quantities (`500m`, `2`, `1Gi`, `512Mi`, `1G`, `1e3`)
in Tidal's units: milli-CPU and MiB.

A quantity is `<number><suffix>` where the suffix is binary (`Ki Mi Gi Ti
Pi Ei`, powers of 1024), decimal (`n u m k M G T P E`, powers of 1000) or a
decimal exponent (`e3`, `E-2`). Values are kept exact (Fraction) and rounded
*up* to the unit, as the API server rounds requests up (`MilliValue`), so a
request is never under-counted: `0.1m` CPU → 1 milli-CPU, `1G` → 954 MiB.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>[eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
MIB = 1 << 20


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity (or is negative)."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity: number × 1024^k, × 1000^k or × 10^e."""
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    if isinstance(text, (int, float)):
        text = str(text)
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        value = number * 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value = number * Fraction(10) ** _DECIMAL[suffix]
    else:  # e3 / E-2: a decimal exponent
        value = number * Fraction(10) ** int(suffix[1:])
    if value < 0:
        raise QuantityError(f"{text!r} is negative")
    return value


def cpu_milli(text: str | int | float) -> int:
    """CPU quantity → milli-CPU, rounded up: ceil(value × 1000)."""
    return math.ceil(parse_quantity(text) * 1000)


def memory_mib(text: str | int | float) -> int:
    """Memory quantity (bytes) → MiB, rounded up: ceil(value / 2^20)."""
    return math.ceil(parse_quantity(text) / MIB)


def count(text: str | int | float) -> int:
    """An extended-resource count such as `nvidia.com/gpu: 2`, rounded up."""
    return math.ceil(parse_quantity(text))
