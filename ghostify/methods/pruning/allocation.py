"""Which heads and neurons to keep: uniform per layer, or one global ranking.

Widths are relative to the *original* architecture (the config's head count and FFN size), so
pruning a 6/12 model to 3/12 keeps 3 of its 6 heads. Kept units are ordered by importance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import torch

from ...errors import GhostifyError
from .settings import ALLOCATIONS, PruneSettings


def heads_for_width(num_heads: int, width: Fraction) -> int:
    return math.floor(num_heads * width)


def check_keeps_a_head(units: int, width: Fraction, noun: str = "head") -> None:
    """Refuse a width that keeps none of ``units`` heads (or attention units)."""
    if heads_for_width(units, width) < 1:
        raise GhostifyError(f"width {width} keeps no {noun} of {units} (floor({units} x {width}) = 0); "
                            f"the smallest width is 1/{units}")


def neurons_for_width(ffn_size: int, width: Fraction) -> int:
    # round half away from zero, so that 0.5 * 37 keeps 19, not banker's 18
    return max(1, math.floor(ffn_size * width + Fraction(1, 2)))


@dataclass
class Selection:
    heads: list[list[int]]  # per layer, indices into the layer as it is now, by importance
    neurons: list[list[int]]


def _top(scores: torch.Tensor, k: int) -> list[int]:
    k = min(k, scores.numel())
    order = torch.argsort(scores, descending=True, stable=True)
    return order[:k].tolist()


def select_uniform(head_scores: Sequence[torch.Tensor], ffn_scores: Sequence[torch.Tensor], n_heads: int, n_neurons: int) -> Selection:
    return Selection(
        heads=[_top(s, n_heads) for s in head_scores],
        neurons=[_top(s, n_neurons) for s in ffn_scores],
    )


def _global(scores: Sequence[torch.Tensor], per_layer_budget: int) -> list[list[int]]:
    """Keep ``per_layer_budget * layers`` units overall, at least one per layer, by scores
    normalised per layer (L2, Michel et al.) so that layers with larger gradients do not win."""
    normalised = [s.float() / s.float().norm().clamp_min(1e-12) for s in scores]
    budget = min(per_layer_budget * len(scores), sum(s.numel() for s in scores))
    keep: list[set[int]] = [{int(torch.argmax(s))} for s in normalised]  # one unit per layer
    candidates = sorted(
        ((float(v), layer, j) for layer, s in enumerate(normalised) for j, v in enumerate(s.tolist()) if j not in keep[layer]),
        key=lambda item: (-item[0], item[1], item[2]),
    )
    remaining = budget - len(scores)
    for _, layer, j in candidates[: max(0, remaining)]:
        keep[layer].add(j)
    return [sorted(k, key=lambda j: (-float(normalised[layer][j]), j)) for layer, k in enumerate(keep)]


def select_global(head_scores: Sequence[torch.Tensor], ffn_scores: Sequence[torch.Tensor], n_heads: int, n_neurons: int) -> Selection:
    return Selection(heads=_global(head_scores, n_heads), neurons=_global(ffn_scores, n_neurons))


def select(
    head_scores: Sequence[torch.Tensor],
    ffn_scores: Sequence[torch.Tensor],
    *,
    num_heads: int,
    ffn_size: int,
    heads_width: Fraction,
    ffn_width: Fraction,
    allocation: str = PruneSettings.allocation,
) -> Selection:
    """The units to keep for the given widths of the original ``num_heads`` and ``ffn_size``
    (widths and allocation as :class:`~ghostify.methods.pruning.settings.PruneSettings` checked them)."""
    n_heads = heads_for_width(num_heads, heads_width)
    check_keeps_a_head(num_heads, heads_width)
    n_neurons = neurons_for_width(ffn_size, ffn_width)
    return ALLOCATORS[allocation](head_scores, ffn_scores, n_heads, n_neurons)


#: how each ``--allocation`` selects (the names are ``settings.ALLOCATIONS``)
ALLOCATORS = {"uniform": select_uniform, "global": select_global}
assert tuple(ALLOCATORS) == ALLOCATIONS
