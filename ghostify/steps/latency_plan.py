"""Which whole layers and how many residual channels a latency budget removes (``compress``'s layer and
hidden-size axes): the allocation of ``prune --speedup`` with each layer and each group of channels as
more candidates (``plan_for_latency`` with the layer and channel scores of ``ghostify importance``), for a
model, its scores and a latency model of its shape."""

from __future__ import annotations

import os

from ..architectures import get_adapter
from ..checkpoint import load_config, read_record
from ..errors import GhostifyError
from ..latency_model import LatencyModel
from ..methods.dropped_layers import check_droppable
from ..methods.hidden import HiddenSettings, refusal
from ..methods.pruning import (ImportanceScores, LatencyPlan, PruneSettings, current_width, model_geometry,
                               plan_for_latency)


def plan_structure(model: str | os.PathLike, importance: str | os.PathLike, latency: str | os.PathLike,
                   speedup: float, *, layers: bool, hidden: bool,
                   criterion: str = PruneSettings.criterion) -> LatencyPlan | None:
    """The plan for a predicted ``speedup`` of ``model`` (scored by ``importance``, a scores file or the
    directory of ``ghostify importance``; ``latency``: a latency model file or directory) when whole
    ``layers`` and/or residual channels (``hidden``) may go too; None where neither may: a model with
    shared layers (drop-layers refuses it) or a family whose hidden size cannot be cut, scores without layer
    or channel scores, a latency model measured at one hidden size only, or one of another shape (``prune
    --speedup`` says so)."""
    config = load_config(model)
    record = read_record(config)
    adapter = get_adapter(config)
    scores = ImportanceScores.load(importance)
    costs = LatencyModel.load(latency)
    if costs.geometry != model_geometry(config, adapter, record):
        return None
    heads, ffn, layer_scores, _ = scores.ranked_by(criterion)
    if layers:
        try:
            check_droppable(adapter, config, record)
        except GhostifyError:
            layer_scores = None
    else:
        layer_scores = None
    channel_scores = None
    if hidden and refusal(config, record.entry("hidden") if record is not None else None) is None \
            and costs.predicts_hidden:
        channel_scores, _ = scores.hidden_ranked_by(HiddenSettings.criterion)
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
    record = read_record(config)
    if layers:
        try:
            check_droppable(get_adapter(config), config, record)
        except GhostifyError:
            layers = False
    if hidden:
        hidden = refusal(config, record.entry("hidden") if record is not None else None) is None
    return layers, hidden


def predicted_speedup(model: str | os.PathLike, latency: str | os.PathLike) -> float:
    """The speed-up the latency model (a file or directory) predicts for the checkpoint ``model`` over the dense
    model it was cut from: its kept layers, heads and neurons, at the residual channels it keeps."""
    config = load_config(model)
    record = read_record(config)
    costs = LatencyModel.load(latency)
    hidden = current_width(config, get_adapter(config), record)
    return costs.dense_ms() / costs.predict([len(h) for h in record.heads], list(record.ffn), hidden)


def plan_layers(model: str | os.PathLike, importance: str | os.PathLike, latency: str | os.PathLike,
                speedup: float, criterion: str = PruneSettings.criterion) -> LatencyPlan | None:
    """:func:`plan_structure` with whole layers as the one more axis."""
    return plan_structure(model, importance, latency, speedup, layers=True, hidden=False, criterion=criterion)


__all__ = ["plan_layers", "plan_structure", "structural_axes"]
