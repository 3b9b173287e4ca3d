"""Dropped layers: settings, their validation and the record format (see :mod:`ghostify.methods.dropped_layers`).

Layer indices are those of the model ``drop-layers`` reads (0-based, as transformers numbers
``encoder.layer``); the record keeps them as indices of the model before any layer was dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import GhostifyError
from ..base import setting
from ..criteria import FISHER, LAYERS, Criterion, choices, criterion

LAYERS_RECORD_FORMAT = 1


@dataclass(frozen=True)
class DropSettings:
    """Which layers ``drop-layers`` keeps: how many (the most important), or exactly which."""

    keep: int | None = setting(None, show_default=False, help="Keep N layers: those whose removal costs least "
                               "loss by the scores of `ghostify importance` (evenly spaced without scores).")
    layers: str | None = setting(None, show_default=False, help="Keep exactly these layers, e.g. 0,2,4 (0-based "
                                 "indices of MODEL's layers).")
    importance: str | None = setting(None, show_default=False, help="Scores file (or directory) from `ghostify "
                                     "importance`, for --keep; default: the ones in MODEL.")
    criterion: str = setting(FISHER, help="What the layer scores (of a gate on each layer's whole update) rank by, "
                             f"for --keep: {choices(LAYERS, FISHER)}.")

    def __post_init__(self) -> None:
        """The refusals the settings alone can get, each in one line (the rest needs the model's depth:
        :meth:`chosen`)."""
        if (self.keep is None) == (self.layers is None):
            both = "both" if self.keep is not None else "neither"
            raise GhostifyError(f"drop-layers got {both} of --keep and --layers; give one: --keep N (keep the N most "
                                "important layers) or --layers 0,2,4 (keep exactly these)")
        criterion(self.criterion, LAYERS)
        if self.layers is not None and self.importance is not None:
            raise GhostifyError(f"--importance {self.importance} is not used with --layers {self.layers} (the layers "
                                "are given); drop --importance, or give --keep N to choose by the scores")

    @property
    def ranking(self) -> Criterion:
        """The criterion the layer scores rank by (``--criterion``, checked)."""
        return criterion(self.criterion, LAYERS)

    def chosen(self, depth: int, first_fixed: str | None = None) -> list[int] | None:
        """The layers ``--layers`` keeps (checked against a model of ``depth`` layers), or None with
        ``--keep`` (the scores choose); each refusal is one line with the value and the fix."""
        if self.layers is None:
            check_keep(self.keep, depth)
            return None
        kept = parse_layers(self.layers, depth)
        if first_fixed and 0 not in kept:
            raise GhostifyError(f"--layers {self.layers} drops layer 0, but {first_fixed}; keep layer 0 "
                                f"(e.g. --layers 0,{','.join(str(i) for i in kept)})")
        return kept


def check_keep(keep: object, depth: int) -> None:
    if isinstance(keep, bool) or not isinstance(keep, int) or not 1 <= keep <= depth:
        raise GhostifyError(f"--keep {keep!r} is not a layer count of this {depth}-layer model; give 1 to {depth} "
                            f"(e.g. --keep {max(1, depth // 2)} keeps half)")


def parse_layers(text: str, depth: int) -> list[int]:
    """``"0,2,4"`` as the sorted, distinct layer indices of a ``depth``-layer model."""
    items = [item.strip() for item in str(text).split(",")]
    try:
        layers = [int(item) for item in items]
    except ValueError:
        bad = next(item for item in items if not item.lstrip("-").isdigit())
        raise GhostifyError(f"--layers {text!r}: {bad!r} is not a layer index; give 0-based indices separated by "
                            f"commas, e.g. 0,2,4") from None
    outside = [i for i in layers if not 0 <= i < depth]
    if outside:
        raise GhostifyError(f"--layers {text}: layer {outside[0]} does not exist; the model has {depth} layers "
                            f"(0 to {depth - 1})")
    repeated = sorted({i for i in layers if layers.count(i) > 1})
    if repeated:
        raise GhostifyError(f"--layers {text} names layer {repeated[0]} twice; list each kept layer once")
    return sorted(layers)


def evenly_spaced(keep: int, depth: int) -> list[int]:
    """The data-free choice: ``keep`` layers evenly spaced from the first to the last (DistilBERT's
    initialisation: 6 of 12 keeps 0,2,4,7,9,11; one layer keeps the first)."""
    if keep == 1:
        return [0]
    return [int(i * (depth - 1) / (keep - 1) + 0.5) for i in range(keep)]  # half up: 3 of 6 keeps 0,3,5


def by_scores(scores: list[float], keep: int, first_fixed: bool) -> list[int]:
    """The ``keep`` layers with the highest scores (ties: the earlier layer), in their order;
    ``first_fixed``: layer 0 always, and the best ``keep - 1`` of the others."""
    ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if first_fixed:
        ranked = [0, *(i for i in ranked if i != 0)]
    return sorted(ranked[:keep])
