"""Numbers for people: 1.23M parameters, 4.56G FLOPs."""

from __future__ import annotations


def human(n: float) -> str:
    """``human(22_713_216) == "22.71M"``."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"
