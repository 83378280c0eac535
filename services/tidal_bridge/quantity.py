"""Kubernetes resource quantities (`500m`, `2`, `1Gi`, `512Mi`, `1G`, `1e3`)
in Tidal's units: milli-CPU and MiB.

A quantity is `<number><suffix>` where the suffix is binary (`Ki Mi Gi Ti
Pi Ei`, powers of 1024), decimal (`n u m k M G T P E`, powers of 1000) or a
decimal exponent (`e3`, `E-2`). Values are kept exact (Fraction) and rounded
*up* to the unit, as the API server rounds requests up (`MilliValue`), so a
request is never under-counted: `0.1m` CPU → 1 milli-CPU, `1G` → 954 MiB.

Bounds, so that no text can make the arithmetic hang or the event
unpublishable: at most MAX_TEXT characters, a decimal exponent within
±MAX_EXPONENT, and a result (milli-CPU, MiB, count) that fits in 64 bits.
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
MAX_TEXT = 64  # the API server's canonical quantities are a few characters
MAX_EXPONENT = 64  # 10**64 is computed at once; 10**(10**9) never finishes
MAX_RESULT = 2**63 - 1  # what an event's integers hold (tidal_schemas.common.MAX_INT)


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity (or is negative)."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity: number × 1024^k, × 1000^k or × 10^e."""
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    if isinstance(text, int) and abs(text) > MAX_RESULT:
        raise QuantityError(f"{_shown(str(text))} is too large")
    if isinstance(text, (int, float)):
        text = str(text)
    if isinstance(text, str) and len(text.strip()) > MAX_TEXT:
        raise QuantityError(f"{_shown(text)} is not a Kubernetes quantity (over {MAX_TEXT} characters)")
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"{_shown(text)} is not a Kubernetes quantity")
    number = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        value = number * 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value = number * Fraction(10) ** _DECIMAL[suffix]
    else:  # e3 / E-2: a decimal exponent
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"{_shown(text)}: exponent {exponent} is outside ±{MAX_EXPONENT}")
        value = number * Fraction(10) ** exponent
    if value < 0:
        raise QuantityError(f"{_shown(text)} is negative")
    return value


def _shown(text: object) -> str:
    quoted = repr(text)
    return quoted if len(quoted) <= MAX_TEXT else quoted[:MAX_TEXT] + "…"


def _bounded(value: Fraction, text: object) -> int:
    result = math.ceil(value)
    if result > MAX_RESULT:
        raise QuantityError(f"{_shown(text)} is too large")
    return result


def cpu_milli(text: str | int | float) -> int:
    """CPU quantity → milli-CPU, rounded up: ceil(value × 1000)."""
    return _bounded(parse_quantity(text) * 1000, text)


def memory_mib(text: str | int | float) -> int:
    """Memory quantity (bytes) → MiB, rounded up: ceil(value / 2^20)."""
    return _bounded(parse_quantity(text) / MIB, text)


def count(text: str | int | float) -> int:
    """An extended-resource count such as `nvidia.com/gpu: 2`, rounded up."""
    return _bounded(parse_quantity(text), text)
