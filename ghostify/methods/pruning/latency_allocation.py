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
from fractions import Fraction
from typing import Any

import torch

from ...architectures import ArchitectureAdapter
from ...errors import GhostifyError
from ...latency_model import Geometry, LatencyModel
from ..base import registry
from .allocation import Selection, heads_for_width, neurons_for_width
from .settings import CRITERIA

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


@dataclass
class _State:
    """What the greedy removal has kept so far."""

    heads: list[int]
    neurons: list[int]
    applications: list[int]
    width: int
    dropped: set[int]

    def kept(self) -> list[int]:
        return [l for l in range(len(self.heads)) if l not in self.dropped]


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
    _check_finite(head_scores, ffn_scores)
    layer_values = _layer_values(layer_scores, layers)
    droppable = [l for l in range(layers) if layer_values is not None and applications[l] == 1
                 and not (first_layer_fixed and l == 0)]
    width = latency.geometry.hidden_size if hidden is None else hidden
    state = _State([t.numel() for t in head_scores], [t.numel() for t in ffn_scores], applications, width, set())
    group = max(1, latency.geometry.ffn_size // NEURON_GROUPS)
    queues = [_groups(head_scores[l], 1) for l in range(layers)] + [_groups(ffn_scores[l], group) for l in range(layers)]
    channel_groups, narrowest = _channel_groups(channel_scores, channel_step, latency, width)
    check_reachable(latency, target_ms, state.heads, state.neurons, applications, droppable, hidden=hidden,
                    narrowest=narrowest)
    removed: list[set[int]] = [set() for _ in queues]
    gone_channels: set[int] = set()

    def ratio(kind: int, layer: int, value: float, count: int) -> float:
        """Score lost per millisecond saved by a removal of ``count`` units of ``kind`` now (inf: it saves nothing)."""
        base, layer_ms, head_ms, neuron_ms = latency.costs(state.width if state.width != latency.geometry.hidden_size
                                                           else None)
        if kind == 0:
            saving = head_ms * applications[layer] * count
        elif kind == 1:
            saving = neuron_ms * applications[layer] * count
        elif kind == 2:
            saving = layer_ms + head_ms * state.heads[layer] + neuron_ms * state.neurons[layer]
        else:
            c = latency.per_channel
            saving = count * (c.base + sum(applications[l] * (c.layer + c.head * state.heads[l] + c.neuron * state.neurons[l])
                                           for l in state.kept()))
        return value / saving if saving > 0 else math.inf

    def predicted() -> float:
        kept = state.kept()
        return predict(latency, [state.heads[l] for l in kept], [state.neurons[l] for l in kept],
                       [applications[l] for l in kept], hidden=None if state.width == latency.geometry.hidden_size
                       else state.width)

    # the next removal of each layer's heads (queue l, kind 0) and neurons (queue layers + l, kind 1), each
    # droppable layer whole (kind 2) and the next channels (kind 3), by ratio; ties go to the lower layer, then
    # heads, neurons, the whole layer, channels: the same order on every run
    frontier = [(ratio(q // layers, q % layers, *queues[q][0][0:2]), q % layers, q // layers, 0, q)
                for q in range(len(queues)) if queues[q]]
    frontier += [(ratio(2, l, layer_values[l], 1), l, 2, 0, -1) for l in droppable]
    if channel_groups:
        frontier.append((ratio(3, layers, *channel_groups[0][0:2]), layers, 3, 0, -1))
    frontier = [entry for entry in frontier if entry[0] < math.inf]
    heapq.heapify(frontier)
    while predicted() > target_ms:
        if not frontier:  # only where fitted costs are negative: the check above covers the rest
            raise _out_of_reach(latency, target_ms, predicted(), bool(droppable))
        stored, layer, kind, rank, queue = heapq.heappop(frontier)
        if kind in (0, 1, 2) and layer in state.dropped:
            continue
        if kind == 2:
            value, count = layer_values[layer], 1
        elif kind == 3:
            value, count = channel_groups[rank][0:2]
        else:
            value, count = queues[queue][rank][0:2]
        now = ratio(kind, layer, value, count)
        if now == math.inf:
            continue
        if now > stored:  # it saves less now than when it was queued (other units went): it waits its turn
            heapq.heappush(frontier, (now, layer, kind, rank, queue))
            continue
        if kind == 2:
            if len(state.dropped) + 1 < layers:
                state.dropped.add(layer)
            continue
        if kind == 3:
            gone_channels.update(channel_groups[rank][2])
            state.width -= count
            if rank + 1 < len(channel_groups):
                heapq.heappush(frontier, (ratio(3, layers, *channel_groups[rank + 1][0:2]), layers, 3, rank + 1, -1))
            continue
        units = queues[queue][rank][2]
        removed[queue].update(units)
        counts = state.neurons if kind else state.heads
        counts[layer] -= len(units)
        if rank + 1 < len(queues[queue]):
            heapq.heappush(frontier, (ratio(kind, layer, *queues[queue][rank + 1][0:2]), layer, kind, rank + 1, queue))
    channels = None
    if channel_scores is not None:
        channels = _kept(channel_scores, gone_channels)
    if state.dropped or gone_channels:
        # the kept layers' units again from all they have, as `prune --speedup` after `drop-layers` and
        # `prune-hidden` does: units removed before a layer or channels went may no longer be needed
        rest = state.kept()
        plan = plan_for_latency([head_scores[l] for l in rest], [ffn_scores[l] for l in rest], latency, target_ms,
                                applications=[applications[l] for l in rest],
                                hidden=None if state.width == latency.geometry.hidden_size else state.width)
        return LatencyPlan(layers=rest, selection=plan.selection, predicted_ms=plan.predicted_ms,
                           dropped=sorted(state.dropped), channels=channels)
    selection = Selection(heads=[_kept(head_scores[l], removed[l]) for l in range(layers)],
                          neurons=[_kept(ffn_scores[l], removed[layers + l]) for l in range(layers)])
    return LatencyPlan(layers=list(range(layers)), selection=selection, predicted_ms=predicted(), dropped=[],
                       channels=channels)


def _groups(scores: torch.Tensor, group: int) -> list[tuple[float, int, list[int]]]:
    """The units one layer can lose, lowest-scored first, in groups of ``group`` (its best unit stays): each
    group's summed score, size and units."""
    values = scores.double().tolist()
    order = sorted(range(len(values)), key=lambda j: (values[j], j))[:-1]  # stable: ties by index
    groups = [order[i:i + group] for i in range(0, len(order), group)]
    return [(math.fsum(values[j] for j in g), len(g), g) for g in groups]


def _channel_groups(scores: torch.Tensor | None, step: int, latency: LatencyModel,
                    width: int) -> tuple[list[tuple[float, int, list[int]]], int | None]:
    """The residual channels the allocation may remove, lowest-scored first, ``step`` at a time, down to the
    narrowest hidden size the latency model was measured at (it does not extrapolate below), and that width."""
    if scores is None or not latency.predicts_hidden:
        return [], None
    if scores.numel() != width:
        raise ValueError(f"{scores.numel()} channel scores for {width} channels")
    if not bool(torch.isfinite(scores).all()) or bool((scores < 0).any()):
        raise GhostifyError("the channel scores hold negative, NaN or infinite values; re-run `ghostify importance`")
    measured = [row["hidden"] for row in latency.probes if row.get("hidden")]
    narrowest = max(step, math.ceil(min(measured) / step) * step) if measured else width
    values = scores.double().tolist()
    order = sorted(range(width), key=lambda c: (values[c], c))[: max(0, width - narrowest)]
    groups = [order[i:i + step] for i in range(0, len(order) - len(order) % step, step)]
    return [(math.fsum(values[c] for c in g), len(g), g) for g in groups], narrowest


def _layer_values(scores: Sequence[float] | torch.Tensor | None, layers: int) -> list[float] | None:
    if scores is None:
        return None
    values = torch.as_tensor(scores, dtype=torch.float64).flatten()
    if values.numel() != layers:
        raise ValueError(f"{values.numel()} layer scores for {layers} layers")
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        raise GhostifyError("the layer scores hold negative, NaN or infinite values; re-run `ghostify importance`")
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
                    hidden: int | None = None, narrowest: int | None = None) -> None:
    """Refuse a target that even :meth:`LatencyModel.fastest_ms` does not meet (at the ``narrowest`` hidden size
    the allocation may cut to, else at ``hidden``), naming the best speed-up."""
    best = latency.fastest_ms(heads, neurons, applications, droppable, narrowest if narrowest is not None else hidden)
    if best > target_ms:
        raise _out_of_reach(latency, target_ms, best, bool(droppable), narrowest is not None)


def _out_of_reach(latency: LatencyModel, target_ms: float, best: float, layers_too: bool,
                  hidden_too: bool = False) -> GhostifyError:
    dense = latency.dense_ms()
    fewest = ("dropping every layer that may go and keeping 1 head and 1 FFN neuron per layer left" if layers_too
              else "1 head and 1 FFN neuron per layer") + (" at the narrowest hidden size measured" if hidden_too else "")
    advice = "ask for less" if layers_too else "ask for less, or drop layers first (`ghostify drop-layers`)"
    return GhostifyError(
        f"a predicted {target_ms:.4g} ms (a speed-up of {dense / target_ms:.3g}x over the dense {dense:.4g} ms) is "
        f"out of reach: even {fewest} predict {best:.4g} ms, a speed-up of at most "
        f"{dense / best:.3g}x on {latency.deployment.describe()}; {advice}")


def _kept(scores: torch.Tensor, removed: set[int]) -> list[int]:
    values = scores.double().tolist()
    return sorted((j for j in range(len(values)) if j not in removed), key=lambda j: (-values[j], j))


def _check_finite(*groups: Sequence[torch.Tensor]) -> None:
    for tensors in groups:
        for layer, t in enumerate(tensors):
            if not bool(torch.isfinite(t).all()) or bool((t < 0).any()):
                raise GhostifyError(f"the importance scores of layer {layer} hold negative, NaN or infinite values; "
                                    "re-run `ghostify importance`")


def comparable_scores(heads: Sequence[torch.Tensor], ffn: Sequence[torch.Tensor],
                      criterion: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Head and neuron scores on one scale. The loss criteria are (the module's docstring); others (weight
    magnitude) are divided by their kind's total over all layers, so that all the heads and all the
    neurons weigh the same in sum."""
    if criterion in CRITERIA:
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
    (the method that dropped them says how many there were). ``ghostify latency`` describes a model
    the same way (``steps.latency.original_geometry``)."""
    origin = _origin(record, "layer_origin")
    layers = origin[1] if origin is not None else adapter.num_layers(config)
    channels = _origin(record, "channel_origin")
    hidden = channels[1] if channels is not None else adapter.hidden_size(config)
    return Geometry(family=adapter.family or str(config.model_type), hidden_size=hidden,
                    num_heads=adapter.num_units(config), ffn_size=adapter.ffn_size(config), num_layers=layers)


def current_width(config: Any, adapter: ArchitectureAdapter, record: Any) -> int | None:
    """The residual channels a model keeps when a method cut them (``prune-hidden``), else None (all of them)."""
    return adapter.hidden_size(config) if _origin(record, "channel_origin") is not None else None


def _origin(record: Any, hook: str) -> tuple[list[int], int] | None:
    """``(kept, of)`` of the method that dropped layers or cut channels (``Method.layer_origin`` /
    ``Method.channel_origin``), else None."""
    for method in registry():
        entry = record.entry(method.name) if record is not None else None
        if entry and getattr(method, hook) is not None:
            return getattr(method, hook)(entry)
    return None
