"""Which whole layers and how many residual channels a latency budget removes (``compress``'s layer and
hidden-size axes): the allocation of ``prune --speedup`` with each layer and each group of channels as
more candidates (``plan_for_latency`` with the layer and channel scores of ``ghostify importance``), for a
model, its scores and a latency model of its shape."""

from __future__ import annotations

import os
from typing import Any

from ..architectures import get_adapter
from ..checkpoint import load_config, read_record
from ..errors import GhostifyError
from ..latency_model import LatencyModel
from ..methods.dropped_layers import check_droppable
from ..methods.hidden import HiddenSettings, refusal
from ..methods.pruning import (ImportanceScores, LatencyPlan, PruneSettings, check_reachable, current_width,
                               layer_consistent, measured_widths, model_geometry, plan_for_latency)


def plan_structure(model: str | os.PathLike, importance: str | os.PathLike, latency: str | os.PathLike,
                   speedup: float, *, layers: bool, hidden: bool,
                   criterion: str = PruneSettings.criterion) -> LatencyPlan | None:
    """The plan for a predicted ``speedup`` of ``model`` (scored by ``importance``, a scores file or the
    directory of ``ghostify importance``; ``latency``: a latency model file or directory) when whole
    ``layers`` and/or residual channels (``hidden``) may go too; None where neither may: a model with
    shared layers (drop-layers refuses it) or a family whose hidden size cannot be cut (:func:`structural_axes`),
    scores without layer or channel scores, a latency model measured at one hidden size only, or one of another
    shape (``prune --speedup`` says so)."""
    config = load_config(model)
    record = read_record(config)
    adapter = get_adapter(config)
    scores = ImportanceScores.load(importance)
    costs = LatencyModel.load(latency)
    if costs.geometry != model_geometry(config, adapter, record):
        return None
    layers, hidden = _axes(config, record, layers=layers, hidden=hidden)
    heads, ffn, every_layer, _ = scores.ranked_by(criterion)
    heads, ffn = layer_consistent(heads, ffn, every_layer)  # a gutted layer costs what dropping it would
    layer_scores = every_layer if layers else None
    channel_scores = scores.hidden_ranked_by(HiddenSettings.criterion)[0] if hidden and costs.predicts_hidden else None
    if layer_scores is None and channel_scores is None:
        return None
    width = adapter.hidden_size(config)
    return plan_for_latency(heads, ffn, costs, costs.dense_ms() / speedup, layer_scores=layer_scores,
                            first_layer_fixed=bool(adapter.first_layer_fixed(config)), channel_scores=channel_scores,
                            channel_step=adapter.num_heads(config),
                            hidden=None if width == costs.geometry.hidden_size else width)


def structural_axes(model: str | os.PathLike, *, layers: bool, hidden: bool) -> tuple[bool, bool]:
    """Which of the asked axes ``model``'s structure allows: whole layers (not where layers are shared) and
    residual channels (not in a family whose hidden size cannot be cut); :func:`plan_structure` plans with these."""
    config = load_config(model)
    return _axes(config, read_record(config), layers=layers, hidden=hidden)


def _axes(config: Any, record: Any, *, layers: bool, hidden: bool) -> tuple[bool, bool]:
    if layers:
        try:
            check_droppable(get_adapter(config), config, record)
        except GhostifyError:
            layers = False
    if hidden:
        hidden = refusal(config, record.entry("hidden") if record is not None else None) is None
    return layers, hidden


def check_reach(model: str | os.PathLike, costs: LatencyModel, speedup: float, *, layers: bool, hidden: bool) -> None:
    """Refuse ``speedup`` where even the fewest units would not reach it by ``costs`` (a latency model of ``model``'s
    shape): 1 head and 1 FFN neuron per layer, all layers but one gone where ``layers`` may go and the structure
    allows, at the narrowest hidden size measured where ``hidden`` may be cut (``compress``, before any stage runs;
    the same check and refusal as ``prune --speedup``'s), advising the axes not asked for."""
    can_drop, can_cut = structural_axes(model, layers=True, hidden=True)  # what this model's structure allows
    g = costs.geometry
    measured = measured_widths(costs)
    narrowest = min(measured) if hidden and can_cut and measured else None
    axes = [flag for flag, off in (("whole layers (--drop-layers)", can_drop and not layers),
                                   ("residual channels (--prune-hidden)", can_cut and not hidden
                                    and costs.predicts_hidden)) if off]
    check_reachable(costs, costs.dense_ms() / speedup, [g.num_heads] * g.num_layers, [g.ffn_size] * g.num_layers,
                    droppable=range(g.num_layers) if layers and can_drop else (), narrowest=narrowest,
                    more=f"let {' or '.join(axes)} go" if axes else "")


def predicted_speedup(model: str | os.PathLike, latency: str | os.PathLike) -> float:
    """The speed-up the latency model (a file or directory) predicts for the checkpoint ``model`` over the dense
    model it was cut from: its kept layers, heads and neurons, at the residual channels it keeps."""
    config = load_config(model)
    record = read_record(config)
    costs = LatencyModel.load(latency)
    hidden = current_width(config, get_adapter(config), record)
    return costs.dense_ms() / costs.predict([len(h) for h in record.heads], list(record.ffn), hidden)


__all__ = ["check_reach", "plan_structure", "predicted_speedup", "structural_axes"]
