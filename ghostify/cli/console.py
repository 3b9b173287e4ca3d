"""The CLI's consoles: :mod:`ghostify.console` (shared with training's progress bar), and
:func:`~ghostify.units.human` that the commands format numbers with."""

from __future__ import annotations

from ..console import err, out, print_json, progress
from ..units import human

__all__ = ["err", "human", "out", "print_json", "progress"]
