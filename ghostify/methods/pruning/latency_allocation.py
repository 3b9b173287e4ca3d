"""Which heads and neurons to keep for a latency budget (``prune --speedup X --latency FILE``).

Greedy removal, as in the mask search of Kwon et al. 2022 ("A Fast Post-Training Pruning
Framework for Transformers"), ranked by the scores of ``ghostify importance``: start from what the
model keeps now and repeatedly remove the unit that loses the least importance per millisecond
it saves by the latency model (a head saves ``head_ms``, a group of the lowest-scored FFN neurons
``neuron_ms`` each), until the predicted latency is at most the target. Every layer keeps at least
one head and one neuron. :func:`plan_for_latency` with layer scores also weighs removing a whole
layer (``drop-layers``): it saves ``layer_ms`` and whatever the layer still keeps, and loses the
layer's score, E|dL/dg| for a gate on the layer's whole update, in the same unit as a head's.

The loss scores of heads and of neurons are comparable as they are: each is a statistic of dL/dg for
a multiplicative gate at 1 on the unit's output (``gates.py``). E|dL/dg| (``loss-gradient``) is the
first-order estimate of the loss change when the gate goes to 0, in the loss's units; E[(dL/dg)²]
(``fisher``, the default) is twice its second-order estimate, and half the sum over a removed set
estimates what removing the set together costs (Kwon et al.), in the loss's units too, so the
greedy removal by the lowest score per millisecond is their knapsack rule. Weight-magnitude scores (the data-free
fallback) are not: a head's is a product of two Frobenius norms of whole slices, a neuron's of
vector norms. They are put on one scale by :func:`comparable_scores`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from fractions import Fraction
from typing import Any

import torch

from ...architectures import ArchitectureAdapter
from ...errors import GhostifyError
from ...latency_model import Geometry, LatencyModel
from ..base import channel_origin, layer_origin
from ..criteria import get as get_criterion
from ..scores import check_scores
from .allocation import Selection, heads_for_width, neurons_for_width

#: FFN neurons are removed in groups of ``ffn_size // NEURON_GROUPS`` (at least 1): a few dozen
#: steps per layer instead of thousands
NEURON_GROUPS = 64


def select_for_latency(
    head_scores: Sequence[torch.Tensor],
    ffn_scores: Sequence[torch.Tensor],
    latency: LatencyModel,
    target_ms: float,
    *,
    applications: Sequence[int] | None = None,
    hidden: int | None = None,
) -> tuple[Selection, float]:
    """The units to keep so that ``latency`` predicts at most ``target_ms``, and that prediction.

    ``head_scores[l]`` / ``ffn_scores[l]`` score the heads and neurons distinct layer ``l`` has now
    (what is not scored is not there); ``applications[l]`` is how often layer ``l`` runs in one
    forward pass (1 unless layers are shared), so that a unit removed from it saves that many
    times its cost; ``hidden``: the residual channels the model keeps (None: all, as measured).
    Kept units are listed by importance, as :func:`~.allocation.select` lists them.
    A unit whose removal the model predicts saves nothing (a fitted cost <= 0) is never removed.
    """
    plan = plan_for_latency(head_scores, ffn_scores, latency, target_ms, applications=applications, hidden=hidden)
    return plan.selection, plan.predicted_ms


@dataclass(frozen=True)
class LatencyPlan:
    """What :func:`plan_for_latency` keeps: the layers (indices of the model's, increasing), the
    heads and neurons of each of them (in the same order, by importance), the residual channels, and the
    predicted latency."""

    layers: list[int]
    selection: Selection
    predicted_ms: float
    #: the layers it removes whole (``drop-layers --layers`` keeps :attr:`layers`)
    dropped: list[int]
    #: the residual channels kept (``prune-hidden`` keeps as many, by the same scores) and their count (None: the
    #: hidden size was not an axis)
    channels: list[int] | None = None

    @property
    def hidden(self) -> int | None:
        return None if self.channels is None else len(self.channels)


class Kind(IntEnum):
    """What one removal of the greedy search takes away; on a tie of score per millisecond, the lower layer goes
    first, then heads before neurons, neurons before a whole layer, a layer before residual channels."""

    HEADS = 0
    NEURONS = 1
    LAYER = 2
    CHANNELS = 3


@dataclass(frozen=True)
class Group:
    """Units one removal takes away together: their summed score, how many, and which (indices as they are now)."""

    score: float
    size: int
    units: list[int]


@dataclass(frozen=True, order=True)
class Candidate:
    """The next removal of one kind (of one layer's heads or neurons, of one layer whole, or of channels), ordered
    by the score it loses per millisecond it saves (as it was when queued), then by :class:`Kind`'s tie rule.
    ``rank``: which of its queue's groups it is (0: the lowest-scored)."""

    ratio: float
    layer: int
    kind: Kind
    rank: int


@dataclass
class _State:
    """What the greedy removal has kept so far."""

    heads: list[int]
    neurons: list[int]
    applications: list[int]
    width: int
    dropped: set[int]

    def kept(self) -> list[int]:
        return [layer for layer in range(len(self.heads)) if layer not in self.dropped]


def plan_for_latency(
    head_scores: Sequence[torch.Tensor],
    ffn_scores: Sequence[torch.Tensor],
    latency: LatencyModel,
    target_ms: float,
    *,
    applications: Sequence[int] | None = None,
    layer_scores: Sequence[float] | torch.Tensor | None = None,
    first_layer_fixed: bool = False,
    channel_scores: torch.Tensor | None = None,
    channel_step: int = 1,
    hidden: int | None = None,
) -> LatencyPlan:
    """:func:`select_for_latency`, where with ``layer_scores`` (one per layer, ``ImportanceScores.layers``)
    removing a whole layer is one more candidate: it saves ``layer_ms`` and the cost of the heads and
    neurons the layer keeps at that moment, and loses the layer's score. A layer that runs more than
    once (shared) is never removed, nor layer 0 when ``first_layer_fixed`` (the family's adapter says
    so: ``first_layer_fixed``), and one layer always stays. With ``channel_scores`` (one per residual channel
    the model keeps now: ``hidden`` of them, the full hidden size when None) and a latency model measured at
    several hidden sizes, removing ``channel_step`` channels at a time is one more: it saves what a channel
    saves of the constant, of every kept layer and of every head and neuron kept at that moment, down to the
    narrowest hidden size the latency model was measured at. Every saving only shrinks as other units go, so a
    candidate popped with a stale ratio is re-queued with its current one (lazy greedy). Once the layers and
    channels to remove are chosen, the kept layers' heads and neurons are allocated again from all they have
    at that width, as ``prune --speedup`` allocates them on the model ``drop-layers`` and ``prune-hidden``
    leave (there by its own scores). Without ``layer_scores`` no layer is removed, without
    ``channel_scores`` no channel.
    """
    layers = len(head_scores)
    applications = list(applications) if applications is not None else [1] * layers
    if len(ffn_scores) != layers or len(applications) != layers:
        raise ValueError(f"{layers} layers of head scores, {len(ffn_scores)} of FFN scores, "
                         f"{len(applications)} applications")
    check_scores(list(head_scores), "the importance scores of layer {layer}")
    check_scores(list(ffn_scores), "the importance scores of layer {layer}")
    layer_values = _layer_values(layer_scores, layers)
    droppable = [layer for layer in range(layers) if layer_values is not None and applications[layer] == 1
                 and not (first_layer_fixed and layer == 0)]
    full = latency.geometry.hidden_size
    state = _State([t.numel() for t in head_scores], [t.numel() for t in ffn_scores], applications,
                   full if hidden is None else hidden, set())
    neuron_group = max(1, latency.geometry.ffn_size // NEURON_GROUPS)
    # each layer's removals of heads and of neurons, lowest-scored first
    removals = {Kind.HEADS: [_groups(scores, 1) for scores in head_scores],
                Kind.NEURONS: [_groups(scores, neuron_group) for scores in ffn_scores]}
    channel_groups, narrowest = _channel_groups(channel_scores, channel_step, latency, state.width)
    check_reachable(latency, target_ms, state.heads, state.neurons, applications, droppable, hidden=hidden,
                    narrowest=narrowest)
    removed = {kind: [set() for _ in range(layers)] for kind in (Kind.HEADS, Kind.NEURONS)}
    gone_channels: set[int] = set()

    def group(kind: Kind, layer: int, rank: int) -> Group:
        if kind == Kind.LAYER:
            return Group(layer_values[layer], 1, [layer])
        if kind == Kind.CHANNELS:
            return channel_groups[rank]
        return removals[kind][layer][rank]

    def ratio(kind: Kind, layer: int, removal: Group) -> float:
        """Score lost per millisecond saved by ``removal`` now (inf: it saves nothing)."""
        _, layer_ms, head_ms, neuron_ms = latency.costs(state.width if state.width != full else None)
        if kind == Kind.HEADS:
            saving = head_ms * applications[layer] * removal.size
        elif kind == Kind.NEURONS:
            saving = neuron_ms * applications[layer] * removal.size
        elif kind == Kind.LAYER:
            saving = layer_ms + head_ms * state.heads[layer] + neuron_ms * state.neurons[layer]
        else:
            c = latency.per_channel
            saving = removal.size * (c.base + sum(applications[kept] * (c.layer + c.head * state.heads[kept]
                                                                        + c.neuron * state.neurons[kept])
                                                  for kept in state.kept()))
        return removal.score / saving if saving > 0 else math.inf

    def candidate(kind: Kind, layer: int, rank: int) -> Candidate:
        return Candidate(ratio(kind, layer, group(kind, layer, rank)), layer, kind, rank)

    def predicted() -> float:
        kept = state.kept()
        return predict(latency, [state.heads[i] for i in kept], [state.neurons[i] for i in kept],
                       [applications[i] for i in kept], hidden=None if state.width == full else state.width)

    frontier = [candidate(kind, layer, 0) for kind in (Kind.HEADS, Kind.NEURONS) for layer in range(layers)
                if removals[kind][layer]]
    frontier += [candidate(Kind.LAYER, layer, 0) for layer in droppable]
    if channel_groups:
        frontier.append(candidate(Kind.CHANNELS, layers, 0))  # after every layer on a tie
    frontier = [c for c in frontier if c.ratio < math.inf]
    heapq.heapify(frontier)
    while predicted() > target_ms:
        if not frontier:  # only where fitted costs are negative: the check above covers the rest
            raise out_of_reach(latency, target_ms, predicted(), layers=bool(droppable))
        popped = heapq.heappop(frontier)
        kind, layer, rank = popped.kind, popped.layer, popped.rank
        if kind != Kind.CHANNELS and layer in state.dropped:
            continue
        now = candidate(kind, layer, rank)
        if now.ratio == math.inf:
            continue
        if now.ratio > popped.ratio:  # it saves less now than when it was queued (other units went): it waits its turn
            heapq.heappush(frontier, now)
            continue
        if kind == Kind.LAYER:
            if len(state.dropped) + 1 < layers:
                state.dropped.add(layer)
            continue
        taken = group(kind, layer, rank)
        if kind == Kind.CHANNELS:
            gone_channels.update(taken.units)
            state.width -= taken.size
            if rank + 1 < len(channel_groups):
                heapq.heappush(frontier, candidate(kind, layer, rank + 1))
            continue
        removed[kind][layer].update(taken.units)
        counts = state.neurons if kind == Kind.NEURONS else state.heads
        counts[layer] -= len(taken.units)
        if rank + 1 < len(removals[kind][layer]):
            heapq.heappush(frontier, candidate(kind, layer, rank + 1))
    channels = None if channel_scores is None else _kept(channel_scores, gone_channels)
    if state.dropped or gone_channels:
        # the kept layers' units again from all they have, as `prune --speedup` after `drop-layers` and
        # `prune-hidden` does: units removed before a layer or channels went may no longer be needed
        rest = state.kept()
        plan = plan_for_latency([head_scores[i] for i in rest], [ffn_scores[i] for i in rest], latency, target_ms,
                                applications=[applications[i] for i in rest],
                                hidden=None if state.width == full else state.width)
        return LatencyPlan(layers=rest, selection=plan.selection, predicted_ms=plan.predicted_ms,
                           dropped=sorted(state.dropped), channels=channels)
    selection = Selection(heads=[_kept(head_scores[i], removed[Kind.HEADS][i]) for i in range(layers)],
                          neurons=[_kept(ffn_scores[i], removed[Kind.NEURONS][i]) for i in range(layers)])
    return LatencyPlan(layers=list(range(layers)), selection=selection, predicted_ms=predicted(), dropped=[],
                       channels=channels)


def _groups(scores: torch.Tensor, size: int) -> list[Group]:
    """The units one layer can lose, lowest-scored first, in groups of ``size`` (its best unit stays)."""
    values = scores.double().tolist()
    order = sorted(range(len(values)), key=lambda j: (values[j], j))[:-1]  # stable: ties by index
    groups = [order[i:i + size] for i in range(0, len(order), size)]
    return [Group(math.fsum(values[j] for j in g), len(g), g) for g in groups]


def _channel_groups(scores: torch.Tensor | None, step: int, latency: LatencyModel,
                    width: int) -> tuple[list[Group], int | None]:
    """The residual channels the allocation may remove, lowest-scored first, ``step`` at a time, down to the
    narrowest hidden size the latency model was measured at (it does not extrapolate below), and that width."""
    if scores is None or not latency.predicts_hidden:
        return [], None
    if scores.numel() != width:
        raise ValueError(f"{scores.numel()} channel scores for {width} channels")
    check_scores(scores, "the channel scores")
    measured = measured_widths(latency)
    narrowest = max(step, math.ceil(min(measured) / step) * step) if measured else width
    values = scores.double().tolist()
    order = sorted(range(width), key=lambda c: (values[c], c))[: max(0, width - narrowest)]
    groups = [order[i:i + step] for i in range(0, len(order) - len(order) % step, step)]
    return [Group(math.fsum(values[c] for c in g), len(g), g) for g in groups], narrowest


def _layer_values(scores: Sequence[float] | torch.Tensor | None, layers: int) -> list[float] | None:
    if scores is None:
        return None
    values = torch.as_tensor(scores, dtype=torch.float64).flatten()
    if values.numel() != layers:
        raise ValueError(f"{values.numel()} layer scores for {layers} layers")
    check_scores(values, "the layer scores")
    return values.tolist()


def uniform_width(latency: LatencyModel, target_ms: float, layers: int | None = None,
                  hidden: int | None = None) -> Fraction | None:
    """The widest uniform width ``k / (8·heads)`` (``prune --width``) whose ``layers`` layers (default: the
    geometry's) at ``hidden`` residual channels (None: all) ``latency`` predicts within ``target_ms``; None when
    not even one head per layer is."""
    g = latency.geometry
    layers = g.num_layers if layers is None else layers
    steps = 8 * g.num_heads
    for k in range(steps, 0, -1):
        width = Fraction(k, steps)
        heads, neurons = heads_for_width(g.num_heads, width), neurons_for_width(g.ffn_size, width)
        if heads >= 1 and latency.predict([heads] * layers, [neurons] * layers, hidden) <= target_ms:
            return width
    return None


def predict(latency: LatencyModel, heads: Sequence[int], neurons: Sequence[int],
            applications: Sequence[int] | None = None, hidden: int | None = None) -> float:
    """``latency``'s prediction for distinct layers of ``heads[l]`` heads and ``neurons[l]`` neurons,
    layer ``l`` running ``applications[l]`` times, at ``hidden`` residual channels (None: all)."""
    applications = applications or [1] * len(heads)
    runs = [l for l, n in enumerate(applications) for _ in range(n)]
    return latency.predict([heads[l] for l in runs], [neurons[l] for l in runs], hidden)


def check_reachable(latency: LatencyModel, target_ms: float, heads: Sequence[int], neurons: Sequence[int],
                    applications: Sequence[int] | None = None, droppable: Sequence[int] = (), *,
                    hidden: int | None = None, narrowest: int | None = None, more: str = "") -> None:
    """Refuse a target that even :meth:`LatencyModel.fastest_ms` does not meet (every layer in ``droppable``
    dropped but one, 1 head and 1 neuron in each layer left, at the ``narrowest`` hidden size the allocation may
    cut to, else at ``hidden``): the one check of a target's reach, for ``prune --speedup`` before any weight is
    read, the allocation itself and ``compress`` before any stage runs. ``more``: the caller's other way to get
    there, advised beside asking for less."""
    fastest = latency.fastest_ms(heads, neurons, applications, droppable,
                                 narrowest if narrowest is not None else hidden)
    if fastest > target_ms:
        raise out_of_reach(latency, target_ms, fastest, layers=bool(droppable), hidden=narrowest is not None,
                           more=more)


def out_of_reach(latency: LatencyModel, target_ms: float, fastest_ms: float, *, layers: bool = False,
                 hidden: bool = False, more: str = "") -> GhostifyError:
    """The one refusal of a target beyond a latency model's reach: what even the fewest units predict, and what to
    ask for instead (where that is no speed-up at all: measure again, or another deployment)."""
    dense = latency.dense_ms()
    best = dense / fastest_ms
    asked = f"--speedup {dense / target_ms:.4g} is out of reach"
    fewest = ("dropping every layer that may go and keeping 1 head and 1 FFN neuron per layer left" if layers
              else "1 head and 1 FFN neuron per layer") + (" at the narrowest hidden size measured" if hidden else "")
    others = f", or {more}" if more else ""
    most = math.floor(best * 10) / 10
    if most <= 1:  # "ask for 1 or less" would advise what is refused
        removed = "pruning heads and FFN neurons" + (", dropping layers" if layers else "") + \
                  (", cutting residual channels" if hidden else "")
        return GhostifyError(f"{asked}: the latency model predicts no speed-up from {removed} (at most {best:.2f}x "
                             f"over the dense {dense:.4g} ms on {latency.deployment.describe()}; per head "
                             f"{latency.head_ms:g} ms, per neuron {latency.neuron_ms:g} ms); measure it again "
                             "(`ghostify latency MODEL --refresh`), target another deployment (--runtime, "
                             f"--batch-size, --seq-len){others}")
    return GhostifyError(f"{asked}: even {fewest} predict {fastest_ms:.4g} ms, a speed-up of at most {best:.3g}x over "
                         f"the dense {dense:.4g} ms on {latency.deployment.describe()}; ask for {most:g} or "
                         f"less{others}")


def measured_widths(latency: LatencyModel) -> list[int]:
    """The narrower hidden sizes ``latency`` was measured at (it predicts down to the narrowest of them)."""
    return [row["hidden"] for row in latency.probes if row.get("hidden")]


def _kept(scores: torch.Tensor, removed: set[int]) -> list[int]:
    values = scores.double().tolist()
    return sorted((j for j in range(len(values)) if j not in removed), key=lambda j: (-values[j], j))


def layer_consistent(heads: Sequence[torch.Tensor], ffn: Sequence[torch.Tensor],
                     layers: Sequence[float] | torch.Tensor | None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each layer's head and neuron scores raised in proportion, where together they sum to less than the layer's
    own score, until they sum to it (``layers``: one per layer, on the same loss scale; None: as they are).

    Removing every head and neuron of a layer removes its whole update, which cannot cost less than removing the
    update does: the layer gate's score, which sees the interactions among the layer's units that their own scores
    leave out. Priced by its units alone, a layer that matters as a whole is gutted by the latency search, which
    then keeps paying for the per-layer costs it cannot remove: on the MiniLM SST-2 teacher (Fisher, 1,024
    examples) the last layer's units sum to 0.013 and the layer scores 0.150; SQuAD at 3x kept six layers of one
    head each and FFNs of 1-24 neurons (benchmarks/results/frontier.md). Units that sum to more than their layer
    (they interact negatively: removing them together costs less) keep their own scores."""
    if layers is None:
        return list(heads), list(ffn)
    values = torch.as_tensor(layers, dtype=torch.float64).flatten().tolist()
    if len(values) != len(heads):
        return list(heads), list(ffn)  # scores of another depth: prune's check says so
    raised_heads, raised_ffn = [], []
    for h, n, whole in zip(heads, ffn, values):
        units = float(h.double().sum()) + float(n.double().sum())
        factor = whole / units if units > 0 and math.isfinite(whole) and whole > units else 1.0
        raised_heads.append(h.double() * factor)
        raised_ffn.append(n.double() * factor)
    return raised_heads, raised_ffn


def comparable_scores(heads: Sequence[torch.Tensor], ffn: Sequence[torch.Tensor],
                      criterion: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Head and neuron scores on one scale. The criteria on the loss's scale are (``Criterion.loss_scale``); others
    (weight magnitude) are divided by their kind's total over all layers, so that all the heads and all the
    neurons weigh the same in sum."""
    found = get_criterion(criterion)
    if found is not None and found.loss_scale:
        return list(heads), list(ffn)

    def share(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        total = float(sum(float(t.double().sum()) for t in tensors))
        return [t.double() / total if total > 0 else t.double() for t in tensors]

    return share(heads), share(ffn)


# ----------------------------------------------------------------------------------------------
# the model a latency model describes
# ----------------------------------------------------------------------------------------------
def model_geometry(config: Any, adapter: ArchitectureAdapter, record: Any) -> Geometry:
    """The original shape of the model ``config`` builds: its family (the adapter's name for it),
    hidden size, attention units (what pruning counts and ``record.heads`` lists: heads, or key/value
    groups with GQA), FFN size and layer applications per forward pass, before any layer was dropped
    or channel cut (the method that did it says how many there were). ``ghostify latency`` describes a model
    by it too (``steps.latency.original_geometry``)."""
    layers = layer_origin(record)
    channels = channel_origin(record)
    return Geometry(family=adapter.family or str(config.model_type),
                    hidden_size=channels[1] if channels is not None else adapter.hidden_size(config),
                    num_heads=adapter.num_units(config), ffn_size=adapter.ffn_size(config),
                    num_layers=layers[1] if layers is not None else adapter.num_layers(config))


def current_width(config: Any, adapter: ArchitectureAdapter, record: Any) -> int | None:
    """The residual channels a model keeps when a method cut them (``prune-hidden``), else None (all of them)."""
    return adapter.hidden_size(config) if channel_origin(record) is not None else None
