"""To which widths ``prune`` cuts: a width (uniform per layer, or one global ranking), or a
predicted speed-up under a latency model (``--speedup``, ``latency_allocation.py``).

Widths are relative to the *original* architecture (the config's head count and FFN size), so
pruning a 6/12 model to 3/12 keeps 3 of its 6 heads. Kept units are ordered by importance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ...errors import GhostifyError
from ..base import setting

ALLOCATIONS = ("uniform", "global")
#: what the scores of ``ghostify importance`` rank by: the Fisher information of the gates, E[(dL/dg)²]
#: (Kwon et al. 2022: half the sum over a removed set is its second-order loss increase), or the first-order
#: E|dL/dg| (Michel et al. 2019). Weight magnitude is what prune falls back to without scores.
FISHER = "fisher"
LOSS_GRADIENT = "loss-gradient"
WEIGHT_MAGNITUDE = "weight-magnitude"
CRITERIA = (FISHER, LOSS_GRADIENT)
#: mask tuning holds out an eighth of its examples (at least one batch) to check the scales on
TUNE_MIN_EXAMPLES = 16
#: examples per forward pass of mask tuning (fewer when there are under 8 batches of them)
TUNE_BATCH_SIZE = 32


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
                              "across layers (per-layer normalised); with --width.")
    speedup: float | None = setting(None, show_default=False,
                                    help="Instead of a width: keep the most importance, heads and neurons across all "
                                    "layers, for a predicted latency <= dense / X (needs --latency).")
    latency: str | None = setting(None, show_default=False, help="Latency model (file, or the directory of `ghostify "
                                  "latency MODEL -o DIR`) that --speedup predicts with.")
    criterion: str = setting(FISHER, help=f"What the scores rank by: {FISHER} (E[(dL/dg)^2], the loss increase to "
                             f"second order; Kwon et al. 2022) or {LOSS_GRADIENT} (E|dL/dg|, first order).")
    # off by default: on MiniLM it lowered the block objective but cost accuracy on 3 of 4 tasks
    # (benchmarks/results/retraining_free.md); compress tries it as one of its candidates
    rearrange: bool = setting(False, flag="--rearrange/--no-rearrange", help="Choose which heads and neurons each "
                              "layer keeps by the layer's block of the Fisher information (units that matter "
                              "together), keeping the counts the widths or --speedup chose.")
    tune_masks: int = setting(0, min=0, help="Tune the kept heads' and neurons' scales by least squares on this many "
                              "unlabelled training examples of the scores' data, so that each pruned layer "
                              "reproduces the unpruned one (0: no tuning); folded into the weights.")

    def widths(self) -> tuple[Fraction, Fraction]:
        """The heads' and the FFN's width, each checked (a missing one is refused)."""
        if self.width is None and self.heads_width is None and self.ffn_width is None:
            raise GhostifyError("no width given; pass --width (e.g. 0.25 or 3/12), or --heads-width and --ffn-width, "
                                "or --speedup X with --latency FILE")
        base = parse_width(self.width, "--width") if self.width is not None else None
        heads = parse_width(self.heads_width, "--heads-width") if self.heads_width is not None else base
        ffn = parse_width(self.ffn_width, "--ffn-width") if self.ffn_width is not None else base
        if heads is None or ffn is None:
            raise GhostifyError(f"{'--ffn-width' if ffn is None else '--heads-width'} is not set; pass it, or --width for both")
        if self.allocation not in ALLOCATIONS:
            raise GhostifyError(f"unknown --allocation {self.allocation!r}; choose one of {', '.join(ALLOCATIONS)}")
        return heads, ffn

    def check_search(self) -> None:
        """Refuse an unknown criterion."""
        if self.criterion not in CRITERIA:
            raise GhostifyError(f"unknown --criterion {self.criterion!r}; choose one of {', '.join(CRITERIA)}")
        if isinstance(self.tune_masks, bool) or not isinstance(self.tune_masks, int) or self.tune_masks < 0:
            raise GhostifyError(f"--tune-masks {self.tune_masks!r} must be a whole number of examples (0: no tuning), "
                                "e.g. 1024")
        if 0 < self.tune_masks < TUNE_MIN_EXAMPLES:
            raise GhostifyError(f"--tune-masks {self.tune_masks} is too few examples to fit and check the scales on; "
                                f"give at least {TUNE_MIN_EXAMPLES} (e.g. 1024), or 0 for no tuning")

    def target_speedup(self) -> float | None:
        """The checked ``--speedup`` (None: prune to a width, checked by :meth:`widths`): a number
        above 1, with a latency model, and no width or ``--allocation`` beside it."""
        if self.speedup is None:
            if self.latency is not None:
                raise GhostifyError(f"--latency {self.latency} is read only with --speedup; pass --speedup X (e.g. 2) "
                                    "to prune for a predicted latency, or drop --latency")
            return None
        widths = [f"--{name.replace('_', '-')}" for name in ("width", "heads_width", "ffn_width")
                  if getattr(self, name) is not None]
        if widths:
            raise GhostifyError(f"--speedup and {'/'.join(widths)} are mutually exclusive: --speedup chooses the "
                                "widths of every layer itself; pass one of them")
        speedup = _number(self.speedup)
        if speedup is None or not math.isfinite(speedup) or speedup <= 1:
            raise GhostifyError(f"--speedup {self.speedup!r} must be a finite number above 1 (the predicted latency "
                                "is at most dense / X), e.g. 2")
        if self.allocation != PruneSettings.allocation:
            if self.allocation not in ALLOCATIONS:
                raise GhostifyError(f"unknown --allocation {self.allocation!r}; choose one of {', '.join(ALLOCATIONS)}")
            raise GhostifyError(f"--allocation {self.allocation} is for --width; --speedup allocates heads and neurons "
                                "across all layers by the latency model itself: drop --allocation")
        if self.latency is None:
            raise GhostifyError("--speedup needs --latency, the latency model of the deployment to predict with; "
                                "measure one with `ghostify latency MODEL -o DIR` and pass --latency DIR")
        return speedup


def _number(value: object) -> float | None:
    """``value`` as a float (a number or its text), or None when it is none."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
