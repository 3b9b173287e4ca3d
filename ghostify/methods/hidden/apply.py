"""Hidden-size pruning: choosing the channels, changing a model, and its record entry (see
:mod:`ghostify.methods.hidden`)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...architectures import ArchitectureAdapter, get_adapter
from ...architectures.channels import HiddenWidthError, ResidualParts
from ...errors import GhostifyError
from ...record import RECORD_KEY, GhostifyRecord
from ..base import Context, Entry
from ..criteria import WEIGHT_MAGNITUDE
from ..scores import SCORES_NAME, ImportanceScores
from .modules import has_projection, pad_output, parts_of, set_config, slice_channels
from .settings import HIDDEN_RECORD_FORMAT, HiddenSettings, kept_channels

def original_width(adapter: ArchitectureAdapter, config: Any, entry: Mapping[str, Any] | None) -> int:
    """The hidden size before any hidden-size pruning (the record's ``of``, else the config's)."""
    return int(entry["of"]) if entry else adapter.hidden_size(config)


def projected(adapter: ArchitectureAdapter, config: Any, entry: Mapping[str, Any] | None) -> bool:
    """Whether the model's embeddings are narrower than its original stream and a projection maps them in (the
    record says so once the hidden size was cut; before, the config's explicit embedding size)."""
    if entry:
        return bool(entry.get("embedding_projection"))
    explicit = getattr(config, adapter.embedding_size_key, None) if adapter.embedding_size_key else None
    return adapter.embedding_projection is not None and explicit is not None and explicit != adapter.hidden_size(config)


def refusal(config: Any, entry: Mapping[str, Any] | None) -> str | None:
    """Why the residual stream of a model of ``config`` cannot be cut (one line's reason), or None."""
    adapter = get_adapter(config)
    reason = adapter.hidden_pruning_refusal(config)
    if reason is not None:
        return reason
    # embeddings mapped into the stream whose width the stream now has: nothing tells their modules apart
    if projected(adapter, config, entry) and adapter.embedding_width(config) == adapter.hidden_size(config):
        return (f"its hidden size equals its embedding size ({adapter.hidden_size(config)}) while a projection maps "
                "the embeddings into the residual stream, so their modules cannot be told apart")
    return None


def scorable(model: nn.Module) -> bool:
    """Whether ``ghostify importance`` scores ``model``'s residual channels (its hidden size can be cut)."""
    data = getattr(model.config, RECORD_KEY, None)
    methods = data.get("methods") if isinstance(data, dict) else None
    entry = methods.get("hidden") if isinstance(methods, dict) else None
    if refusal(model.config, entry if isinstance(entry, dict) else None) is not None:
        return False
    try:
        parts_of(model, get_adapter(model.config))
    except HiddenWidthError:
        return False
    return True


def check_refusal(config: Any, entry: Mapping[str, Any] | None) -> None:
    reason = refusal(config, entry)
    if reason is not None:
        raise GhostifyError(f"cannot prune the hidden size of this {get_adapter(config).family} model: {reason}; "
                            "compress it with prune (heads and neurons) and drop-layers instead")


def target_width(config: Any, record: GhostifyRecord | None, settings: HiddenSettings) -> int:
    """The kept channel count, checked against the model as it is now."""
    adapter = get_adapter(config)
    entry = record.entry("hidden") if record is not None else None
    of = original_width(adapter, config, entry)
    now = adapter.hidden_size(config)
    count = kept_channels(settings.width, of, adapter.num_heads(config))
    if count > now:
        raise GhostifyError(f"--hidden-width {settings.hidden_width} keeps {count} of the original {of} channels, but "
                            f"the model has {now} already (widths are relative to the original hidden size); give "
                            f"at most {now}/{of}")
    if (projected(adapter, config, entry) and not adapter.embedding_projection_if_present
            and count == adapter.embedding_width(config)):
        raise GhostifyError(f"--hidden-width {settings.hidden_width} keeps {count} channels, the embedding size: a "
                            f"{adapter.family} model then runs no projection from its embeddings; choose another width")
    return count


def channel_scores(model: nn.Module, record: GhostifyRecord, settings: HiddenSettings,
                   source: str) -> tuple[torch.Tensor, dict[str, Any]]:
    """One score per channel of the stream as it is now, by ``settings.criterion`` (what the history says of it):
    the scores of ``settings.importance`` (else of ``source``'s scores file), else weight magnitude (data-free,
    with a warning)."""
    path = Path(settings.importance) if settings.importance is not None else Path(source) / SCORES_NAME
    if settings.importance is None and not path.is_file():
        warnings.warn(f"no importance scores in {source} and no --importance given: cutting channels by weight "
                      "magnitude (data-free); run `ghostify importance` first for scores of the channels on data",
                      stacklevel=3)
        return magnitude_scores(model, parts_of(model, get_adapter(model.config))), {"criterion": WEIGHT_MAGNITUDE}
    scores = ImportanceScores.load(path)
    width = get_adapter(model.config).hidden_size(model.config)
    values, used = scores.hidden_ranked_by(settings.criterion)
    if values is None:
        raise GhostifyError(f"importance scores in {path} have no channel scores (written by an older ghostify, or for a "
                            "family whose hidden size cannot be cut); re-run `ghostify importance` on this model")
    if values.numel() != width:
        raise GhostifyError(f"importance scores in {path} are for {values.numel()} hidden channels, but the model has "
                            f"{width}; re-run `ghostify importance` on this model")
    if used != settings.criterion:
        warnings.warn(f"the scores in {path} have no {settings.criterion} channel scores: cutting by {used}; re-run "
                      "`ghostify importance` for them", stacklevel=3)
    return values.float(), {"criterion": used, "importance": str(path)}


def magnitude_scores(model: nn.Module, parts: ResidualParts) -> torch.Tensor:
    """Data-free: the squared norm of every weight entry a channel owns (its columns of the readers and tables,
    its rows of the writers), over the whole model."""
    score = torch.zeros(parts.width, dtype=torch.float64)
    for linear in parts.readers:
        score += linear.weight.detach().double().pow(2).sum(0).cpu()
    for linear in parts.writers:
        score += linear.weight.detach().double().pow(2).sum(1).cpu()
    for table in parts.tables:
        score += table.weight.detach().double().pow(2).sum(0).cpu()
    return score.float()


def by_scores(scores: torch.Tensor, count: int) -> list[int]:
    """The ``count`` best-scoring channels (ties: the lower index), in increasing order."""
    ranked = sorted(range(scores.numel()), key=lambda c: (-float(scores[c]), c))
    return sorted(ranked[:count])


def prune_hidden(model: nn.Module, kept: list[int]) -> ResidualParts:
    """Keep the residual channels ``kept`` (indices into the stream as it is now, increasing) of ``model``, in
    place, and make its config describe the result."""
    adapter = get_adapter(model.config)
    try:
        parts = parts_of(model, adapter)
    except HiddenWidthError as exc:
        raise GhostifyError(f"cannot prune the hidden size of this {adapter.family} model: {exc}; compress it with "
                            "prune and drop-layers instead") from None
    head_size = adapter.head_size(model.config)
    projection = has_projection(model, adapter)
    slice_channels(model, parts, kept)
    set_config(model.config, adapter, len(kept), head_size, projection)
    return parts


def cut_hidden(model: nn.Module, record: GhostifyRecord, kept: list[int]) -> GhostifyRecord:
    """Keep the residual channels ``kept`` of a model whose hidden size was never cut (``ghostify latency``'s
    probe models), in place, and return ``record`` with the entry ``prune-hidden`` would write for it."""
    from dataclasses import replace

    adapter = get_adapter(model.config)
    check_refusal(model.config, None)
    of = adapter.hidden_size(model.config)
    projection = projected(adapter, model.config, None)
    prune_hidden(model, kept)
    entry = Entry(format=HIDDEN_RECORD_FORMAT, data={"kept": list(kept), "of": of,
                                                     "head_size": adapter.head_size(model.config),
                                                     "keep_output_dim": False, "embedding_projection": projection})
    return replace(record, methods={**record.methods, "hidden": entry.stored()}, history=list(record.history))


# ----------------------------------------------------------------------------------------------
# the method's lifecycle (ghostify.methods.base.Method)
# ----------------------------------------------------------------------------------------------
def check(config: Any, record: GhostifyRecord | None, settings: HiddenSettings) -> None:
    """Fail before loading any weights when the settings cannot work on this model (the settings checked
    themselves when they were made)."""
    entry = record.entry("hidden") if record is not None else None
    check_refusal(config, entry)
    if settings.importance is not None and not Path(settings.importance).expanduser().exists():
        raise GhostifyError(f"--importance {settings.importance} does not exist; pass the scores file or the output "
                            "directory of `ghostify importance`")
    if settings.keep_output_dim and any("For" in str(name) for name in getattr(config, "architectures", None) or []):
        raise GhostifyError(f"--keep-output-dim pads a bare encoder's output (what sentence embeddings are pooled "
                            f"from), but this model has a task head ({config.architectures[0]}), which reads the "
                            "kept channels; drop --keep-output-dim")
    count = target_width(config, record, settings)
    if count == get_adapter(config).hidden_size(config):
        warnings.warn(f"prune-hidden keeps all {count} channels: nothing is cut", stacklevel=2)


def apply(model: nn.Module, record: GhostifyRecord, settings: HiddenSettings, context: Context) -> Entry:
    adapter = get_adapter(model.config)
    previous = record.entry("hidden")
    check_refusal(model.config, previous)
    count = target_width(model.config, record, settings)
    if settings.keep_output_dim and model.base_model is not model:
        raise GhostifyError(f"--keep-output-dim pads a bare encoder's output, but this model has a task head "
                            f"({type(model).__name__}); drop --keep-output-dim")
    now = adapter.hidden_size(model.config)
    of = original_width(adapter, model.config, previous)
    original = [int(c) for c in previous["kept"]] if previous else list(range(now))
    projection = projected(adapter, model.config, previous)
    scores, history = channel_scores(model, record, settings, context.source)
    kept = by_scores(scores, count)
    pad_output(model, None, of)  # a padding hook of an earlier application pads the old width
    prune_hidden(model, kept)
    chosen = [original[c] for c in kept]
    if settings.keep_output_dim:
        pad_output(model, chosen, of)
    elif model.base_model is model:
        warnings.warn(f"the encoder's output (and a sentence embedding pooled from it) is now {count} wide instead of "
                      f"{of}: vectors of the original model are no longer comparable (re-encode an index), or pass "
                      f"--keep-output-dim to pad the output back to {of}", stacklevel=3)
    data = {"kept": chosen, "of": of, "head_size": adapter.head_size(model.config),
            "keep_output_dim": bool(settings.keep_output_dim), "embedding_projection": projection}
    return Entry(format=HIDDEN_RECORD_FORMAT, data=data, history={"hidden_size": count, **history})
