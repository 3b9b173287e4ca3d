"""Hidden-size pruning: settings, their validation and the record format (see :mod:`ghostify.methods.hidden`).

The width is relative to the *original* hidden size (the record's ``of``), like ``prune``'s widths, and
the kept channel count is rounded to a multiple of the head count: BERT-family, DistilBERT, DeBERTa-v2
and ModernBERT configs refuse a hidden size that the heads do not divide, and one rule for every family
is easier to state than one per family.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ...errors import GhostifyError
from ...settings import parse_width
from ..base import setting
from ..criteria import CHANNELS, LOSS_GRADIENT, Criterion, choices, criterion

HIDDEN_RECORD_FORMAT = 1


def kept_channels(width: Fraction, original: int, heads: int) -> int:
    """How many of ``original`` channels ``width`` keeps: ``original · width`` rounded to the nearest multiple of
    ``heads`` (at least ``heads``)."""
    return max(heads, heads * int(Fraction(original) * width / heads + Fraction(1, 2)))


@dataclass(frozen=True)
class HiddenSettings:
    """To which width ``prune-hidden`` cuts the residual stream, and by which channel scores."""

    # a fraction as text ("192/384") or a number (0.5): the CLI reads text
    hidden_width: str | float = setting(show_default=False, type=str,
                                        help="Width of the residual stream relative to the original hidden size: "
                                        "0.5 or 192/384 (rounded to a multiple of the head count).")
    importance: str | None = setting(None, show_default=False, help="Scores file (or directory) from `ghostify "
                                     "importance`; default: the ones in MODEL.")
    # loss-gradient by measurement (MiniLM on SST-2, CHANGELOG): it kept the most accuracy at 0.75 and 0.5, Fisher
    # close behind, Minitron's activation well behind at 0.5 (0.79 / 0.77 / 0.69 validation accuracy, teacher 0.87)
    criterion: str = setting(LOSS_GRADIENT, help="What the channel scores (of a gate per channel shared by all "
                             f"layers) rank by: {choices(CHANNELS, LOSS_GRADIENT)}.")
    keep_output_dim: bool = setting(False, flag="--keep-output-dim/--no-keep-output-dim",
                                    help="Pad the encoder's output back to the original width with zeros at the "
                                    "cut channels, so that embeddings stay comparable with an existing index "
                                    "(cosine similarities unchanged in kind); a bare encoder only.")

    def __post_init__(self) -> None:
        """Every refusal the settings alone can get, each in one line."""
        criterion(self.criterion, CHANNELS)
        if not isinstance(self.keep_output_dim, bool):
            raise GhostifyError(f"--keep-output-dim {self.keep_output_dim!r} must be true or false")
        object.__setattr__(self, "_width", parse_width(self.hidden_width, "--hidden-width"))  # derived once, here

    @property
    def ranking(self) -> Criterion:
        """The criterion the channel scores rank by (``--criterion``, checked)."""
        return criterion(self.criterion, CHANNELS)

    @property
    def width(self) -> Fraction:
        """The checked width."""
        return self._width
