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
) -> tuple[Selection, float]:
    """The units to keep so that ``latency`` predicts at most ``target_ms``, and that prediction.

    ``head_scores[l]`` / ``ffn_scores[l]`` score the heads and neurons distinct layer ``l`` has now
    (what is not scored is not there); ``applications[l]`` is how often layer ``l`` runs in one
    forward pass (1 unless layers are shared), so that a unit removed from it saves that many
    times its cost. Kept units are listed by importance, as :func:`~.allocation.select` lists them.
    A unit whose removal the model predicts saves nothing (a fitted cost <= 0) is never removed.
    """
    plan = plan_for_latency(head_scores, ffn_scores, latency, target_ms, applications=applications)
    return plan.selection, plan.predicted_ms


@dataclass(frozen=True)
class LatencyPlan:
    """What :func:`plan_for_latency` keeps: the layers (indices of the model's, increasing), the
    heads and neurons of each of them (in the same order, by importance), and the predicted latency."""

    layers: list[int]
    selection: Selection
    predicted_ms: float
    #: the layers it removes whole (``drop-layers --layers`` keeps :attr:`layers`)
    dropped: list[int]


def plan_for_latency(
    head_scores: Sequence[torch.Tensor],
    ffn_scores: Sequence[torch.Tensor],
    latency: LatencyModel,
    target_ms: float,
    *,
    applications: Sequence[int] | None = None,
    layer_scores: Sequence[float] | torch.Tensor | None = None,
    first_layer_fixed: bool = False,
) -> LatencyPlan:
    """:func:`select_for_latency`, where with ``layer_scores`` (one per layer, ``ImportanceScores.layers``)
    removing a whole layer is one more candidate: it saves ``layer_ms`` and the cost of the heads and
    neurons the layer keeps at that moment, and loses the layer's score. A layer that runs more than
    once (shared) is never removed, nor layer 0 when ``first_layer_fixed`` (the family's adapter says
    so: ``first_layer_fixed``), and one layer always stays. Once the layers to remove are chosen, the
    kept layers' heads and neurons are allocated again from all they have, as ``prune --speedup``
    allocates them on the model ``drop-layers`` leaves (there by its own scores). Without
    ``layer_scores`` no layer is removed.
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
    heads = [t.numel() for t in head_scores]
    neurons = [t.numel() for t in ffn_scores]
    group = max(1, latency.geometry.ffn_size // NEURON_GROUPS)
    queues = [_removals(head_scores[l], 1, latency.head_ms * applications[l]) for l in range(layers)]
    queues += [_removals(ffn_scores[l], group, latency.neuron_ms * applications[l]) for l in range(layers)]

    check_reachable(latency, target_ms, heads, neurons, applications, droppable)
    removed: list[set[int]] = [set() for _ in queues]
    dropped: set[int] = set()

    def kept() -> list[int]:
        return [l for l in range(layers) if l not in dropped]

    def predicted() -> float:
        return predict(latency, [heads[l] for l in kept()], [neurons[l] for l in kept()],
                       [applications[l] for l in kept()])

    # the next removal of each layer's heads (queue l, kind 0) and neurons (queue layers + l, kind 1),
    # and each droppable layer whole (kind 2), by its ratio; ties go to the lower layer, then heads,
    # neurons, the whole layer: the same order on every run
    frontier = [(q[0][0], l % layers, l // layers, 0, l) for l, q in enumerate(queues) if q]
    frontier += [(_drop_ratio(latency, layer_values[l], heads[l], neurons[l]), l, 2, 0, -1) for l in droppable]
    heapq.heapify(frontier)
    while predicted() > target_ms:
        if not frontier:  # only where fitted costs are negative: the check above covers the rest
            raise _out_of_reach(latency, target_ms, predicted(), bool(droppable))
        ratio, layer, kind, rank, queue = heapq.heappop(frontier)
        if layer in dropped:
            continue
        if kind == 2:
            now = _drop_ratio(latency, layer_values[layer], heads[layer], neurons[layer])
            if len(dropped) + 1 < layers and now < math.inf:
                if now > ratio:  # the layer kept fewer units since: it saves less now, so it waits its turn
                    heapq.heappush(frontier, (now, layer, 2, 0, -1))
                else:
                    dropped.add(layer)
            continue
        units = queues[queue][rank][1]
        removed[queue].update(units)
        counts = neurons if kind else heads
        counts[layer] -= len(units)
        if rank + 1 < len(queues[queue]):
            heapq.heappush(frontier, (queues[queue][rank + 1][0], layer, kind, rank + 1, queue))
    if dropped:
        # the kept layers' units again from all they have, as `prune --speedup` after `drop-layers` does: units
        # removed before a layer went may no longer be needed
        rest = kept()
        plan = plan_for_latency([head_scores[l] for l in rest], [ffn_scores[l] for l in rest], latency, target_ms,
                                applications=[applications[l] for l in rest])
        return LatencyPlan(layers=rest, selection=plan.selection, predicted_ms=plan.predicted_ms,
                           dropped=sorted(dropped))
    selection = Selection(heads=[_kept(head_scores[l], removed[l]) for l in range(layers)],
                          neurons=[_kept(ffn_scores[l], removed[layers + l]) for l in range(layers)])
    return LatencyPlan(layers=list(range(layers)), selection=selection, predicted_ms=predicted(), dropped=[])


def _layer_values(scores: Sequence[float] | torch.Tensor | None, layers: int) -> list[float] | None:
    if scores is None:
        return None
    values = torch.as_tensor(scores, dtype=torch.float64).flatten()
    if values.numel() != layers:
        raise ValueError(f"{values.numel()} layer scores for {layers} layers")
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        raise GhostifyError("the layer scores hold negative, NaN or infinite values; re-run `ghostify importance`")
    return values.tolist()


def _drop_ratio(latency: LatencyModel, score: float, heads: int, neurons: int) -> float:
    """Score lost per millisecond saved by removing a layer whole (inf when it saves nothing)."""
    saving = latency.layer_run_ms(heads, neurons)
    return score / saving if saving > 0 else math.inf


def uniform_width(latency: LatencyModel, target_ms: float, layers: int | None = None) -> Fraction | None:
    """The widest uniform width ``k / (8·heads)`` (``prune --width``) whose ``layers`` layers (default: the
    geometry's) ``latency`` predicts within ``target_ms``; None when not even one head per layer is."""
    g = latency.geometry
    layers = g.num_layers if layers is None else layers
    steps = 8 * g.num_heads
    for k in range(steps, 0, -1):
        width = Fraction(k, steps)
        heads, neurons = heads_for_width(g.num_heads, width), neurons_for_width(g.ffn_size, width)
        if heads >= 1 and latency.predict([heads] * layers, [neurons] * layers) <= target_ms:
            return width
    return None


def predict(latency: LatencyModel, heads: Sequence[int], neurons: Sequence[int],
            applications: Sequence[int] | None = None) -> float:
    """``latency``'s prediction for distinct layers of ``heads[l]`` heads and ``neurons[l]`` neurons,
    layer ``l`` running ``applications[l]`` times."""
    applications = applications or [1] * len(heads)
    runs = [l for l, n in enumerate(applications) for _ in range(n)]
    return latency.predict([heads[l] for l in runs], [neurons[l] for l in runs])


def _removals(scores: torch.Tensor, group: int, unit_ms: float) -> list[tuple[float, list[int]]]:
    """The units one layer can lose, lowest-scored first, in groups of ``group`` (its best unit
    stays): each group with its score lost per millisecond saved. None when a unit saves nothing."""
    if unit_ms <= 0:
        return []
    values = scores.double().tolist()
    order = sorted(range(len(values)), key=lambda j: (values[j], j))[:-1]  # stable: ties by index
    groups = [order[i:i + group] for i in range(0, len(order), group)]
    return [(math.fsum(values[j] for j in g) / (unit_ms * len(g)), g) for g in groups]


def check_reachable(latency: LatencyModel, target_ms: float, heads: Sequence[int], neurons: Sequence[int],
                    applications: Sequence[int] | None = None, droppable: Sequence[int] = ()) -> None:
    """Refuse a target that even :meth:`LatencyModel.fastest_ms` does not meet, naming the best speed-up."""
    best = latency.fastest_ms(heads, neurons, applications, droppable)
    if best > target_ms:
        raise _out_of_reach(latency, target_ms, best, bool(droppable))


def _out_of_reach(latency: LatencyModel, target_ms: float, best: float, layers_too: bool) -> GhostifyError:
    dense = latency.dense_ms()
    fewest = ("dropping every layer that may go and keeping 1 head and 1 FFN neuron per layer left" if layers_too
              else "1 head and 1 FFN neuron per layer")
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
    origin = _layer_origin(record)
    layers = origin[1] if origin is not None else adapter.num_layers(config)
    return Geometry(family=adapter.family or str(config.model_type), hidden_size=adapter.hidden_size(config),
                    num_heads=adapter.num_units(config), ffn_size=adapter.ffn_size(config), num_layers=layers)


def _layer_origin(record: Any) -> tuple[list[int], int] | None:
    """``(kept, of)`` of the method that dropped layers (``Method.layer_origin``), else None."""
    for method in registry():
        entry = record.entry(method.name) if record is not None else None
        if entry and method.layer_origin is not None:
            return method.layer_origin(entry)
    return None
