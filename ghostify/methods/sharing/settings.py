"""Cross-layer sharing: settings, their validation and the record format (see :mod:`ghostify.methods.sharing`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import GhostifyError
from ..base import setting

if TYPE_CHECKING:  # the CLI reads INITS at start-up, without torch
    from ...architectures import ArchitectureAdapter

INITS = ("mean", "first")


SHARING_RECORD_FORMAT = 1


@dataclass(frozen=True)
class ShareSettings:
    """How ``share-layers`` groups the layers, and what a group's layer starts from."""

    groups: int = setting(show_default=False, help="G contiguous groups of layers, each running one set of parameters "
                          "(sizes differ by at most one when G does not divide the layers; ALBERT needs a divisor).")
    init: str = setting("mean", help=f"{' or '.join(INITS)}: a group's layer starts from the element-wise mean of its "
                        "layers, or from its first layer.")

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise GhostifyError(f"unknown --init {self.init!r}; choose one of {', '.join(INITS)}")


def plan_groups(adapter: ArchitectureAdapter, config, groups: int) -> list[list[int]]:
    """The steps of each of ``groups`` contiguous groups: sizes differ by at most one, the larger
    groups first (12 steps in 5 groups: 3, 3, 2, 2, 2); equal groups where the config shares."""
    depth = adapter.num_layers(config)
    if adapter.layers_not_interchangeable:
        raise GhostifyError(f"cannot share layers: {adapter.layers_not_interchangeable}; compress this model with "
                            "prune, attach-ghost and distill instead")
    if adapter.config_groups is not None:
        # the config runs group int(i / (L / G)) at step i: contiguous equal groups only
        if groups < 1 or depth % groups:
            divisors = [g for g in range(1, depth + 1) if depth % g == 0]
            raise GhostifyError(
                f"--groups {groups} does not divide {adapter.family}'s {depth} layers (its config shares equal groups); "
                f"choose one of {divisors}"
            )
        size = depth // groups
        return [list(range(g * size, (g + 1) * size)) for g in range(groups)]
    if not 1 <= groups <= depth:
        raise GhostifyError(f"--groups {groups} must be between 1 and the model's {depth} layers")
    size, extra = divmod(depth, groups)
    out, start = [], 0
    for g in range(groups):
        end = start + size + (1 if g < extra else 0)
        out.append(list(range(start, end)))
        start = end
    return out


def distinct_layers(config, adapter: ArchitectureAdapter, sharing: Any) -> int | None:
    """How many distinct layers ``config`` builds, given the record's ``sharing`` entry (a family
    whose config shares counts its own groups: share-layers rewrote them)."""
    fact = adapter.config_groups
    if fact is not None:
        return int(getattr(config, fact.count_key)) * int(getattr(config, fact.inner_count_key))
    groups = sharing.get("groups") if isinstance(sharing, dict) else None
    return len(groups) if isinstance(groups, list) and groups else None
