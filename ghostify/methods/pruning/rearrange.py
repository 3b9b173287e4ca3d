"""Mask rearrangement (Kwon et al. 2022, §4.2): keep each layer's counts, choose *which* heads and
neurons of the layer to keep by the layer's block of the Fisher information.

Removing the units of a set ``S`` raises the loss by about ``½ (1−m)ᵀ F (1−m)``, where ``m`` is the
mask (0 on ``S``) and ``F`` the Fisher information of the gates. The search sees only ``F``'s diagonal
(each unit alone); within a layer, units that matter together (two heads that carry the same
pattern, so either alone can go but not both) are coupled through the off-diagonal block ``F_l``.
For each layer this minimises ``f(S) = Σ_{i,j ∈ S} F_l[i, j]`` over the removed sets of the size the
search chose: from the search's set and from Kwon et al.'s greedy set (add units in the order of
their diagonal, each time dropping the one whose removal lowers ``f`` most), whichever is lower,
then swapping a removed and a kept unit while a swap lowers ``f``. It never returns a set whose
``f`` is above the search's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: a swap must lower the objective by more than this share of it (float64 rounding is far smaller)
_TOLERANCE = 1e-12


def gram(factor: torch.Tensor) -> torch.Tensor:
    """The block of the Fisher information (times the example count) from its factor: ``Rᵀ R``, float64."""
    factor = factor.double()
    return factor.T @ factor


def objective(block: torch.Tensor, removed: Sequence[int]) -> float:
    """``(1−m)ᵀ F (1−m)`` for the units ``removed`` (``block``: the layer's Fisher block, any scale)."""
    if not removed:
        return 0.0
    index = torch.as_tensor(list(removed), dtype=torch.long)
    return float(block.index_select(0, index).index_select(1, index).sum())


def rearrange(block: torch.Tensor, kept: Sequence[int], diagonal: torch.Tensor, *, max_swaps: int | None = None) -> list[int]:
    """The units to keep, as many as ``kept``, so that the removed ones have the lowest :func:`objective`
    found; listed by ``diagonal`` (each unit's own Fisher information), highest first. ``max_swaps`` bounds
    the swap search (default: the number of units)."""
    units = block.shape[0]
    kept = list(kept)
    removed = [u for u in range(units) if u not in set(kept)]
    if not removed or not kept:
        return _by_score(kept, diagonal)
    block = block.double()
    start = min((removed, _greedy(block, diagonal, len(removed))), key=lambda s: objective(block, s))
    best = _swaps(block, start, max_swaps if max_swaps is not None else units)
    gone = set(best)
    return _by_score([u for u in range(units) if u not in gone], diagonal)


def _greedy(block: torch.Tensor, diagonal: torch.Tensor, count: int) -> list[int]:
    """Kwon et al.'s greedy set: the ``count`` units lowest on the diagonal, then each further unit (in the
    diagonal's order) joins it and the one whose removal from the set lowers the objective most leaves."""
    order = sorted(range(block.shape[0]), key=lambda u: (float(diagonal[u]), u))
    removed = order[:count]
    inside = block[:, removed].sum(1)  # Σ_{j ∈ S} F[i, j] for every unit i
    for unit in order[count:]:
        removed.append(unit)
        inside += block[:, unit]
        index = torch.as_tensor(removed)
        # f(S − x) = f(S) − 2·inside[x] + F[x, x]: the x to drop is the one with the lowest F[x, x] − 2·inside[x]
        drop = int(torch.argmin(block.diagonal()[index] - 2 * inside[index]))
        gone = removed.pop(drop)
        inside -= block[:, gone]
    return removed


def _swaps(block: torch.Tensor, removed: list[int], max_swaps: int) -> list[int]:
    """Swap a removed unit back in for a kept one while that lowers the objective (best swap first)."""
    units = block.shape[0]
    removed = list(removed)
    is_removed = torch.zeros(units, dtype=torch.bool)
    is_removed[removed] = True
    inside = block[:, removed].sum(1)
    diag = block.diagonal()
    value = objective(block, removed)
    for _ in range(max_swaps):
        out_ = torch.nonzero(is_removed).flatten()  # candidates to bring back
        in_ = torch.nonzero(~is_removed).flatten()  # candidates to remove instead
        # f(S − p + k) − f(S) = F[p,p] − 2·inside[p] + F[k,k] + 2·inside[k] − 2·F[k,p]
        change = ((diag[out_] - 2 * inside[out_])[:, None] + (diag[in_] + 2 * inside[in_])[None, :]
                  - 2 * block[out_][:, in_])
        flat = int(torch.argmin(change))
        gain = float(change.flatten()[flat])
        if gain >= -_TOLERANCE * max(abs(value), 1e-300):
            break
        p, k = int(out_[flat // len(in_)]), int(in_[flat % len(in_)])
        is_removed[p], is_removed[k] = False, True
        inside += block[:, k] - block[:, p]
        value += gain
    return torch.nonzero(is_removed).flatten().tolist()


def _by_score(units: list[int], diagonal: torch.Tensor) -> list[int]:
    return sorted(units, key=lambda u: (-float(diagonal[u]), u))


__all__ = ["gram", "objective", "rearrange"]
