"""Which heads and neurons to keep: uniform per layer, or one global ranking.

Widths are relative to the *original* architecture (the config's head count and FFN size), so
pruning a 6/12 model to 3/12 keeps 3 of its 6 heads. Kept units are ordered by importance.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ...errors import GhostifyError
from ..base import setting

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


@dataclass(frozen=True)
class PruneSettings:
    """To which width ``prune`` cuts, and by which scores."""

    # a fraction as text ("3/12") or a number (0.25): the CLI reads text
    width: str | float | None = setting(None, type=str | None, show_default=False,
                                        help="Width multiplier for heads and FFN: 0.25 or 3/12.")
    heads_width: str | float | None = setting(None, type=str | None, show_default=False,
                                              help="Width for heads only (overrides --width).")
    ffn_width: str | float | None = setting(None, type=str | None, show_default=False,
                                            help="Width for FFN neurons only (overrides --width).")
    importance: str | None = setting(None, show_default=False, help="Scores file (or directory) from `ghostify "
                                     "importance`; default: the ones in MODEL.")
    allocation: str = setting("uniform", help=f"{' or '.join(ALLOCATIONS)}: same width in every layer, or one ranking "
                              "across layers (per-layer normalised).")

    def widths(self) -> tuple[Fraction, Fraction]:
        """The heads' and the FFN's width, each checked (a missing one is refused)."""
        if self.width is None and self.heads_width is None and self.ffn_width is None:
            raise GhostifyError("no width given; pass --width (e.g. 0.25 or 3/12), or --heads-width and --ffn-width")
        base = parse_width(self.width, "--width") if self.width is not None else None
        heads = parse_width(self.heads_width, "--heads-width") if self.heads_width is not None else base
        ffn = parse_width(self.ffn_width, "--ffn-width") if self.ffn_width is not None else base
        if heads is None or ffn is None:
            raise GhostifyError(f"{'--ffn-width' if ffn is None else '--heads-width'} is not set; pass it, or --width for both")
        if self.allocation not in ALLOCATIONS:
            raise GhostifyError(f"unknown --allocation {self.allocation!r}; choose one of {', '.join(ALLOCATIONS)}")
        return heads, ffn
