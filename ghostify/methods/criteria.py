"""What importance scores rank by: the criteria, declared once.

Each :class:`Criterion` says what it is (its name: the ``--criterion`` value of ``prune``, ``drop-layers`` and
``prune-hidden``, the scores file's and the history's word for it), what ``ghostify importance`` sums for it
over the examples, where a scores file holds its scores, which units it ranks, and whether its head and neuron
scores are in the loss's units (then the latency allocation compares them as they are). ``importance``,
``prune``, ``drop-layers``, ``prune-hidden``, the latency allocation and ``compress``'s candidate allocations
all read this registry; adding a criterion is one entry in :data:`_SHIPPED` (or :func:`register`) and its tests.

The loss criteria are statistics of ``dL/dg``, the derivative of the per-example loss with respect to a
multiplicative gate at 1 on a unit's output (``ghostify.methods.pruning.gates``, ``ghostify.methods.hidden.gates``):
E|dL/dg| (``loss-gradient``, Michel et al. 2019) is the first-order estimate of the loss change when the gate
goes to 0; E[(dL/dg)²] (``fisher``, Kwon et al. 2022) is twice its second-order estimate, and half the sum over
a removed set estimates what removing the set together costs. Both are in the loss's units, for heads, neurons,
layers and channels alike. Weight magnitude (the data-free fallback) and Minitron's activation score are not.

This module imports no torch (``ghostify --help`` reads the criteria's names for the ``--criterion`` help).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import GhostifyError

#: the units a criterion may rank
HEADS, NEURONS, LAYERS, CHANNELS = "heads", "neurons", "layers", "channels"

FISHER = "fisher"
LOSS_GRADIENT = "loss-gradient"
ACTIVATION = "activation"
WEIGHT_MAGNITUDE = "weight-magnitude"


@dataclass(frozen=True)
class Criterion:
    """One thing importance scores can rank by."""

    #: the ``--criterion`` value, and the scores file's and the history's word for it
    name: str
    #: what its scores are, in a few words (the ``--criterion`` help: "E[(dL/dg)^2]")
    summary: str
    #: what it is, as a noun (compress's report and the warnings: "the Fisher information")
    noun: str
    #: the units it ranks: what ``--criterion`` of prune (heads and neurons), drop-layers (layers) and
    #: prune-hidden (channels) may name it for
    ranks: frozenset[str]
    #: whether its head and neuron scores are in the loss's units: comparable across heads and neurons as they
    #: are (the latency allocation's knapsack rule); others are put on one scale first (``comparable_scores``)
    loss_scale: bool
    #: what ``ghostify importance`` sums over the examples for it: from one batch's gate gradients dL/dg
    #: (batch x units), the per-unit sum in float64 (the score is that sum over every example / the examples);
    #: None for a criterion that is no statistic of the gate gradients
    accumulate: Callable[[Any], Any] | None = None
    #: its head, neuron and layer scores in a scores file (an ``ImportanceScores``): ``(heads, ffn, layers)``, or
    #: None where the file has none (None: the file's ``more`` scores of this name)
    unit_scores: Callable[[Any], tuple[list[Any], list[Any], Any] | None] | None = None
    #: its residual-channel scores in a scores file, or None where the file has none (None: ``more`` again)
    channel_scores: Callable[[Any], Any] | None = None
    #: whether the scores file also keeps its block among each layer's units (``prune --rearrange`` chooses by
    #: it; compress tries the allocation rearranged by it as one more candidate)
    blocks: bool = False
    #: whether a flag may ask for it (False: what scores are when no data was seen, weight magnitude)
    selectable: bool = True

    def units_in(self, scores: Any) -> tuple[list[Any], list[Any], Any] | None:
        if self.unit_scores is not None:
            return self.unit_scores(scores)
        more = scores.more.get(self.name)
        return None if more is None else (more.heads, more.ffn, more.layers)

    def channels_in(self, scores: Any) -> Any:
        if self.channel_scores is not None:
            return self.channel_scores(scores)
        more = scores.more.get(self.name)
        return None if more is None else more.hidden


def _first_order(scores: Any) -> tuple[list[Any], list[Any], Any] | None:
    """The scores file's own head, neuron and layer scores, when they are E|dL/dg| (not weight magnitude)."""
    return (scores.heads, scores.ffn, scores.layers) if scores.criterion == LOSS_GRADIENT else None


def _fisher(scores: Any) -> tuple[list[Any], list[Any], Any] | None:
    fisher = scores.fisher
    return None if fisher is None else (fisher.heads, fisher.ffn, fisher.layers)


def _magnitude(scores: Any) -> tuple[list[Any], list[Any], Any] | None:
    return (scores.heads, scores.ffn, scores.layers) if scores.criterion == WEIGHT_MAGNITUDE else None


#: the criteria ghostify ships, in the order they are listed (and a scores file lists them)
_SHIPPED = (
    Criterion(FISHER, summary="E[(dL/dg)^2], the loss increase to second order; Kwon et al. 2022",
              noun="the Fisher information", ranks=frozenset({HEADS, NEURONS, LAYERS, CHANNELS}), loss_scale=True,
              accumulate=lambda gradients: gradients.double().pow(2).sum(0), unit_scores=_fisher,
              channel_scores=lambda scores: scores.fisher.hidden if scores.fisher is not None else None, blocks=True),
    Criterion(LOSS_GRADIENT, summary="E|dL/dg|, first order; Michel et al. 2019", noun="first-order scores",
              ranks=frozenset({HEADS, NEURONS, LAYERS, CHANNELS}), loss_scale=True,
              accumulate=lambda gradients: gradients.abs().sum(0).double(), unit_scores=_first_order,
              channel_scores=lambda scores: scores.hidden),
    Criterion(ACTIVATION, summary="Minitron: mean |x| at every norm's output", noun="activation scores",
              ranks=frozenset({CHANNELS}), loss_scale=False, unit_scores=lambda scores: None,
              channel_scores=lambda scores: scores.hidden_activation),
    Criterion(WEIGHT_MAGNITUDE, summary="the norms of a unit's weights; data-free", noun="weight magnitude",
              ranks=frozenset({HEADS, NEURONS}), loss_scale=False, unit_scores=_magnitude,
              channel_scores=lambda scores: None, selectable=False),
)

_REGISTRY: dict[str, Criterion] = {c.name: c for c in _SHIPPED}
#: the names of the scores files written before the registry: their criteria have places of their own in the file
#: (the first-order scores its plain ``heads.i``, Fisher's ``fisher.*``, activation's ``activation.hidden``)
LEGACY = (FISHER, LOSS_GRADIENT, ACTIVATION, WEIGHT_MAGNITUDE)


def register(criterion: Criterion) -> Criterion:
    """Add a criterion (a plug-in's, or a test's); its scores live in a scores file's ``more`` under its name."""
    if criterion.name in _REGISTRY:
        raise GhostifyError(f"a criterion named {criterion.name!r} is registered already")
    _REGISTRY[criterion.name] = criterion
    return criterion


def unregister(name: str) -> None:
    """Remove a criterion :func:`register` added (the shipped ones stay)."""
    if name in LEGACY:
        raise GhostifyError(f"{name!r} is one of ghostify's own criteria")
    _REGISTRY.pop(name, None)


def criteria() -> tuple[Criterion, ...]:
    """Every registered criterion, in order."""
    return tuple(_REGISTRY.values())


def names(unit: str) -> tuple[str, ...]:
    """What ``--criterion`` may name for ``unit`` (HEADS, LAYERS, CHANNELS)."""
    return tuple(c.name for c in _REGISTRY.values() if c.selectable and unit in c.ranks)


def criterion(name: Any, unit: str) -> Criterion:
    """The criterion ``--criterion name`` asks for to rank ``unit``; an unknown one is refused in one line."""
    found = _REGISTRY.get(name) if isinstance(name, str) else None
    if found is None or not found.selectable or unit not in found.ranks:
        raise GhostifyError(f"unknown --criterion {name!r}; choose one of {', '.join(names(unit))}")
    return found


def get(name: str) -> Criterion | None:
    """The criterion named ``name`` (a scores file's or a history's word), or None."""
    return _REGISTRY.get(name)


def choices(unit: str, first: str | None = None) -> str:
    """The ``--criterion`` help's list for ``unit``: "fisher (E[(dL/dg)^2], ...) or loss-gradient (...)", with
    ``first`` (the default) first."""
    listed = sorted(names(unit), key=lambda name: name != first)
    parts = [f"{name} ({_REGISTRY[name].summary})" for name in listed]
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"


def candidates() -> tuple[tuple[str, str, bool], ...]:
    """The latency searches compress compares before training: ``(name, criterion, rearranged)`` for each criterion
    on the loss's scale that ranks heads and neurons, and the same rearranged by its blocks where the scores keep
    them ("fisher", "fisher+rearranged", "loss-gradient")."""
    out: list[tuple[str, str, bool]] = []
    for c in _REGISTRY.values():
        if c.selectable and c.loss_scale and {HEADS, NEURONS} <= c.ranks:
            out.append((c.name, c.name, False))
            if c.blocks:
                out.append((f"{c.name}+rearranged", c.name, True))
    return tuple(out)


__all__ = ["ACTIVATION", "CHANNELS", "Criterion", "FISHER", "HEADS", "LAYERS", "LEGACY", "LOSS_GRADIENT", "NEURONS",
           "WEIGHT_MAGNITUDE", "candidates", "choices", "criteria", "criterion", "get", "names", "register",
           "unregister"]
