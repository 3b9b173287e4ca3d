"""Dropped layers: choosing the layers to keep, changing a model, and its record entry (see
:mod:`ghostify.methods.dropped_layers`)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter, get_adapter
from ...errors import GhostifyError
from ...record import GhostifyRecord
from ..base import Context, Entry, registry
from ..criteria import FISHER
from ..scores import SCORES_NAME, ImportanceScores  # the scores file `importance` writes
from .modules import keep_layers
from .settings import LAYERS_RECORD_FORMAT, DropSettings, by_scores, evenly_spaced


def check_droppable(adapter: ArchitectureAdapter, config, record: GhostifyRecord | None = None) -> None:
    """Refuse a family whose config shares its layers (ALBERT), and a model whose record says a
    method made several steps run one layer (``share-layers``): no step has a layer of its own to drop."""
    for method in registry():  # the methods that map layers to steps declare how many distinct layers there are
        if method.distinct_layers is not None and method.present(record):
            raise GhostifyError(
                f"the model has {method.noun} ({method.command}): dropping a shared layer would drop it from every "
                f"step that runs it; drop-layers before {method.command}: apply drop-layers to the checkpoint "
                f"{method.command} was applied to (its history names it)"
            )
    groups = adapter.config_groups
    if groups is not None:
        raise GhostifyError(
            f"cannot drop layers of an {adapter.family} model: its config runs {getattr(config, groups.count_key)} "
            f"shared layer group(s) over all {adapter.num_layers(config)} steps ({groups.count_key}), so no step has a "
            "layer of its own to drop; compress it with prune, attach-ghost and distill instead"
        )


def choose_layers(model: nn.Module, record: GhostifyRecord, keep: int, source: str,
                  importance: str | None, criterion: str = FISHER) -> tuple[list[int], dict[str, Any]]:
    """The ``keep`` layers to keep (indices of ``model``'s layers) and what the history says of
    the choice: by the layer scores of ``importance`` (else of ``source``'s own scores file), else
    evenly spaced (data-free, with a warning)."""
    adapter = get_adapter(model.config)
    depth = len(adapter.layers(model))
    first_fixed = adapter.first_layer_fixed(model.config)
    path = Path(importance) if importance is not None else Path(source) / SCORES_NAME
    if importance is None and not path.is_file():
        kept = evenly_spaced(keep, depth)
        warnings.warn(
            f"no importance scores in {source} and no --importance given: keeping {keep} evenly spaced layers "
            f"{','.join(map(str, kept))} of {depth} (data-free, as DistilBERT); run `ghostify importance` first to "
            "keep the layers whose removal costs least loss",
            stacklevel=3,
        )
        return kept, {"criterion": "evenly-spaced"}
    scores = ImportanceScores.load(path)
    scores.check_matches(record, str(path))
    _, _, layer_scores, used = scores.ranked_by(criterion)
    if layer_scores is None:
        raise GhostifyError(f"importance scores in {path} have no layer scores (written by an older ghostify); re-run "
                            "`ghostify importance` on this model")
    if used != criterion:
        warnings.warn(f"the scores in {path} have no {criterion} information (written by an older ghostify): keeping "
                      f"layers by {used}; re-run `ghostify importance` for them", stacklevel=3)
    values = [float(v) for v in layer_scores]
    kept = by_scores(values, keep, first_fixed is not None)
    if first_fixed and 0 not in by_scores(values, keep, False):
        warnings.warn(f"kept layer 0 although its score is among the lowest: {first_fixed}", stacklevel=3)
    return kept, {"criterion": used, "importance": str(path)}


# ----------------------------------------------------------------------------------------------
# the method's lifecycle (ghostify.methods.base.Method)
# ----------------------------------------------------------------------------------------------
def check(config: Any, record: GhostifyRecord | None, settings: DropSettings) -> None:
    """Fail before loading any weights when the settings cannot work."""
    adapter = get_adapter(config)
    check_droppable(adapter, config, record)
    depth = adapter.num_layers(config)
    kept = settings.chosen(depth, adapter.first_layer_fixed(config))
    if settings.importance is not None and not Path(settings.importance).expanduser().exists():
        raise GhostifyError(f"--importance {settings.importance} does not exist; pass the scores file or the output "
                            "directory of `ghostify importance`")
    if (len(kept) if kept is not None else settings.keep) == depth:
        warnings.warn(f"drop-layers keeps all {depth} layers: nothing is dropped", stacklevel=2)


def apply(model: nn.Module, record: GhostifyRecord, settings: DropSettings, context: Context) -> Entry:
    adapter = get_adapter(model.config)
    check_droppable(adapter, model.config, record)
    depth = len(adapter.layers(model))
    kept = settings.chosen(depth, adapter.first_layer_fixed(model.config))
    history: dict[str, Any] = {"criterion": "given"}
    if kept is None:
        kept, history = choose_layers(model, record, settings.keep, context.source, settings.importance,
                                      settings.criterion)
    previous = record.entry("dropped_layers")  # dropping again: the record keeps indices of the original model
    original = [int(i) for i in previous["kept"]] if previous else list(range(depth))
    of = int(previous["of"]) if previous else depth
    keep_layers(model, adapter, kept)
    return Entry(format=LAYERS_RECORD_FORMAT, data={"kept": [original[i] for i in kept], "of": of},
                 heads=[list(record.heads[i]) for i in kept], ffn=[record.ffn[i] for i in kept],
                 history={"kept": kept, **history})
