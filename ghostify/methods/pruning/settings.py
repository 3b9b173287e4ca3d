"""Which heads and neurons to keep: uniform per layer, or one global ranking.

Widths are relative to the *original* architecture (the config's head count and FFN size), so
pruning a 6/12 model to 3/12 keeps 3 of its 6 heads. Kept units are ordered by importance.
"""

from __future__ import annotations

from fractions import Fraction

from ...errors import GhostifyError

ALLOCATIONS = ("uniform", "global")


def parse_width(text: str | float | Fraction, name: str = "--width") -> Fraction:
    """``"0.25"``, ``"3/12"`` or a number, as an exact fraction in (0, 1]."""
    try:
        value = Fraction(str(text).strip())
    except (ValueError, ZeroDivisionError):
        raise GhostifyError(f"{name} {text!r} is not a number; give a fraction such as 0.25 or 3/12") from None
    if not 0 < value <= 1:
        raise GhostifyError(f"{name} {text} is outside (0, 1]; give a fraction such as 0.25 or 3/12")
    return value
