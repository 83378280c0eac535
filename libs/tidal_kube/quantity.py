"""Kubernetes resource quantities, exact, read and written as the API
server does (`k8s.io/apimachinery/pkg/api/resource`).

A quantity is `<number><suffix>`: a binary suffix (`Ki Mi Gi Ti Pi Ei`,
powers of 1024), a decimal one (`n u m "" k M G T P E`, powers of 1000) or a
decimal exponent (`e3`). Values are kept exact as Fractions.

Written back in canonical form, the form the API server stores:

- decimal (CPU): the largest power of 1000 that leaves an integer mantissa,
  `1.5` → `1500m`, `8000m` → `8`, `8000` → `8k`;
- binary (memory): the largest power of 1024 that leaves an integer
  mantissa, `16384Mi` → `16Gi`, `1536Mi` → `1536Mi`, a byte count that is
  not a multiple of 1024 → plain bytes. A value below one byte's precision
  is rounded up to the byte, as `Quantity.String()` rounds up.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SYNTAX = re.compile(r"^(?P<number>\+?(?:\d+(?:\.\d*)?|\.\d+))"
                     r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d{1,3}|[numkMGTPE])?$")
BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
DECIMAL = {"n": -3, "u": -2, "m": -1, "": 0, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}  # powers of 1000
MAX_TEXT = 64
MIB = 1 << 20


class QuantityError(ValueError):
    """The text is not a non-negative Kubernetes quantity."""


def shown(text: object) -> str:
    """`text` quoted for an error message, at most MAX_TEXT characters and an ellipsis
    (quoting escapes characters, so a short text may quote longer)."""
    quoted = repr(text)
    return quoted if len(quoted) <= MAX_TEXT else quoted[:MAX_TEXT] + "…"


def parse(text: object) -> Fraction:
    """The exact value of a quantity (`"7910m"` → 791/100, `"1Ki"` → 1024)."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise QuantityError(f"{shown(text)} is not a Kubernetes quantity")
    text = str(text).strip()
    match = _SYNTAX.match(text) if len(text) <= MAX_TEXT else None
    if match is None:
        raise QuantityError(f"{shown(text)} is not a Kubernetes quantity")
    number, suffix = Fraction(match["number"].lstrip("+")), match["suffix"] or ""
    if suffix in BINARY:
        return number * 1024 ** BINARY[suffix]
    if suffix in DECIMAL:
        return number * Fraction(1000) ** DECIMAL[suffix]
    return number * Fraction(10) ** int(suffix[1:])


def is_binary(text: str) -> bool:
    """Whether a quantity is written with a binary suffix (`Ki`…`Ei`)."""
    return str(text).strip().endswith(tuple(BINARY))


def format_decimal(value: Fraction | int) -> str:
    """`value` in canonical decimal form: mantissa × 1000^k for the largest
    k (from n = 1000^-3 up to E) leaving an integer mantissa; a value finer
    than nano is rounded up to it."""
    value = Fraction(value)
    if value < 0:
        raise QuantityError(f"{value} is negative")
    nanos = math.ceil(value * 1000 ** 3)
    if nanos == 0:
        return "0"
    power = -3
    while nanos % 1000 == 0 and power < 6:
        nanos //= 1000
        power += 1
    suffix = next(s for s, p in DECIMAL.items() if p == power)
    return f"{nanos}{suffix}"


def format_binary(value: Fraction | int) -> str:
    """`value` (bytes) in canonical binary form: mantissa × 1024^k for the
    largest k leaving an integer mantissa, plain bytes when k = 0; rounded
    up to the byte."""
    value = Fraction(value)
    if value < 0:
        raise QuantityError(f"{value} is negative")
    count = math.ceil(value)
    power = 0
    while count and count % 1024 == 0 and power < 6:
        count //= 1024
        power += 1
    return str(count) + next((s for s, p in BINARY.items() if p == power), "")


def milli(text: object) -> Fraction:
    """A CPU quantity in milli-CPU, exact (`"7910m"` → 7910)."""
    return parse(text) * 1000


def mebibytes(text: object) -> Fraction:
    """A memory quantity in MiB, exact (`"1536Ki"` → 3/2)."""
    return parse(text) / MIB
