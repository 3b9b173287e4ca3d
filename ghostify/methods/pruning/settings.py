"""To which widths ``prune`` cuts: a width (uniform per layer, or one global ranking), or a
predicted speed-up under a latency model (``--speedup``, ``latency_allocation.py``).

Widths are relative to the *original* architecture (the config's head count and FFN size), so
pruning a 6/12 model to 3/12 keeps 3 of its 6 heads. Kept units are ordered by importance.

The settings are checked once, when they are made (``__post_init__``): what they derive (the widths, the
target speed-up, the criterion) is then an attribute that ``check`` and ``apply`` read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from ...errors import GhostifyError
from ...latency_model import LatencyModel
from ...settings import checked_speedup, parse_width
from ..base import setting
from ..criteria import FISHER, HEADS, Criterion, choices, criterion

ALLOCATIONS = ("uniform", "global")
#: mask tuning holds out an eighth of its examples (at least one batch) to check the scales on
TUNE_MIN_EXAMPLES = 16
#: examples per forward pass of mask tuning (fewer when there are under 8 batches of them)
TUNE_BATCH_SIZE = 32
#: the most real (unpadded) tokens mask tuning reads: its cost grows with tokens, not examples. 2,048 sentences of
#: SST-2 or CoNLL-2003 are 27-40k tokens (about a minute on 2 CPU cores); 2,048 questions of SQuAD in windows of 256
#: tokens are 600k (11 minutes, more than half of a 20-minute compress budget), and the least squares have at most a
#: few thousand unknowns per layer, which this many token rows determine well
TUNE_MAX_TOKENS = 2**17


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
    criterion: str = setting(FISHER, help=f"What the scores rank by: {choices(HEADS, FISHER)}.")
    # off by default: on MiniLM it lowered the block objective but cost accuracy on 3 of 4 tasks
    # (benchmarks/results/retraining_free.md); compress tries it as one of its candidates
    rearrange: bool = setting(False, flag="--rearrange/--no-rearrange", help="Choose which heads and neurons each "
                              "layer keeps by the layer's block of the Fisher information (units that matter "
                              "together), keeping the counts the widths or --speedup chose.")
    tune_masks: int = setting(0, help="Tune the kept heads' and neurons' scales by least squares on this many "
                              "unlabelled training examples of the scores' data (at most their first "
                              f"{TUNE_MAX_TOKENS:,} tokens), so that each pruned layer reproduces the unpruned one "
                              "(0: no tuning); folded into the weights.")

    def __post_init__(self) -> None:
        """Every refusal the settings alone can get, each in one line, in the order a reader checks them."""
        criterion(self.criterion, HEADS)
        _check_tune_masks(self.tune_masks)
        speedup = self._target_speedup()
        # derived once, here (not fields: they are no settings of their own)
        object.__setattr__(self, "_speedup", speedup)
        object.__setattr__(self, "_widths_kept", self._widths() if speedup is None else None)

    @property
    def ranking(self) -> Criterion:
        """The criterion the scores rank by (``--criterion``, checked)."""
        return criterion(self.criterion, HEADS)

    @property
    def target_speedup(self) -> float | None:
        """The checked ``--speedup`` (None: prune to :attr:`widths`): above 1, with a latency model, and no width or
        ``--allocation`` beside it."""
        return self._speedup

    @property
    def widths(self) -> tuple[Fraction, Fraction] | None:
        """The heads' and the FFN's width, each checked (None with ``--speedup``)."""
        return self._widths_kept

    @functools.cached_property
    def latency_model(self) -> LatencyModel | None:
        """The latency model ``--latency`` names, read once (None without ``--speedup``); a missing or damaged one
        is refused in one line."""
        return None if self.latency is None or self.target_speedup is None else LatencyModel.load(self.latency)

    def _widths(self) -> tuple[Fraction, Fraction]:
        if self.width is None and self.heads_width is None and self.ffn_width is None:
            raise GhostifyError("no width given; pass --width (e.g. 0.25 or 3/12), or --heads-width and --ffn-width, "
                                "or --speedup X with --latency FILE")
        base = parse_width(self.width, "--width") if self.width is not None else None
        heads = parse_width(self.heads_width, "--heads-width") if self.heads_width is not None else base
        ffn = parse_width(self.ffn_width, "--ffn-width") if self.ffn_width is not None else base
        if heads is None or ffn is None:
            raise GhostifyError(f"{'--ffn-width' if ffn is None else '--heads-width'} is not set; pass it, or --width for both")
        _check_allocation(self.allocation)
        return heads, ffn

    def _target_speedup(self) -> float | None:
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
        speedup = checked_speedup(self.speedup)
        if self.allocation != PruneSettings.allocation:
            _check_allocation(self.allocation)
            raise GhostifyError(f"--allocation {self.allocation} is for --width; --speedup allocates heads and neurons "
                                "across all layers by the latency model itself: drop --allocation")
        if self.latency is None:
            raise GhostifyError("--speedup needs --latency, the latency model of the deployment to predict with; "
                                "measure one with `ghostify latency MODEL -o DIR` and pass --latency DIR")
        return speedup


def _check_allocation(allocation: str) -> None:
    if allocation not in ALLOCATIONS:
        raise GhostifyError(f"unknown --allocation {allocation!r}; choose one of {', '.join(ALLOCATIONS)}")


def _check_tune_masks(count: object) -> None:
    """``--tune-masks``: a whole number of examples, 0 (no tuning) or enough to fit and check the scales on."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise GhostifyError(f"--tune-masks {count!r} must be a whole number of examples (0: no tuning), e.g. 1024")
    if 0 < count < TUNE_MIN_EXAMPLES:
        raise GhostifyError(f"--tune-masks {count} is too few examples to fit and check the scales on; give at least "
                            f"{TUNE_MIN_EXAMPLES} (e.g. 1024), or 0 for no tuning")
