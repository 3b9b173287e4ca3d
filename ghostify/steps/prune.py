"""``ghostify prune``: structured pruning to a width multiplier, by importance."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from ..architectures import get_adapter
from ..checkpoint import load_config, load_model, model_record, read_record, save_checkpoint
from ..errors import GhostifyError
from ..files import check_output_dir
from ..methods import check_order
from ..methods.pruning import ALLOCATIONS, SCORES_NAME, ImportanceScores, magnitude_importance, parse_width
from ..methods.pruning.allocation import heads_for_width
from ..methods.pruning.apply import check_scores_match
from ..methods.pruning.apply import prune as prune_in_place
from ..record import GhostifyRecord, history_entry


def prune(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    width: str | float | None = None,
    heads_width: str | float | None = None,
    ffn_width: str | float | None = None,
    importance: str | os.PathLike | None = None,
    allocation: str = "uniform",
    overwrite: bool = False,
) -> GhostifyRecord:
    """Prune ``model`` to ``width`` (or separate head/FFN widths) and write it to ``output``.

    Scores come from ``importance`` (a scores file or a directory holding one), else from
    ``model`` itself when it is the output of ``ghostify importance``, else from weight magnitude.

    Example:
        >>> prune("out/scored", "out/pruned", width="3/12")  # doctest: +SKIP
    """
    if width is None and heads_width is None and ffn_width is None:
        raise GhostifyError("no width given; pass --width (e.g. 0.25 or 3/12), or --heads-width and --ffn-width")
    base = parse_width(width, "--width") if width is not None else None
    h_width = parse_width(heads_width, "--heads-width") if heads_width is not None else base
    f_width = parse_width(ffn_width, "--ffn-width") if ffn_width is not None else base
    if h_width is None or f_width is None:
        missing = "--ffn-width" if f_width is None else "--heads-width"
        raise GhostifyError(f"{missing} is not set; pass it, or --width for both")
    out = check_output_dir(output, overwrite=overwrite, inputs=(model, ("--importance", importance)))
    if importance is not None and not Path(importance).expanduser().exists():
        raise GhostifyError(f"--importance {importance} does not exist; pass the scores file or the output directory of `ghostify importance`")
    _check_widths(load_config(model), h_width, allocation)
    net = load_model(model)
    record = model_record(net)
    scores, source = _scores(net, model, importance)
    check_scores_match(net, record, scores, source)
    _, new_record = prune_in_place(net, record, scores, heads_width=h_width, ffn_width=f_width, allocation=allocation)
    new_record.history.append(
        history_entry(
            "prune",
            {
                "model": str(model),
                "heads_width": str(h_width),
                "ffn_width": str(f_width),
                "allocation": allocation,
                "importance": source,
                "criterion": scores.metadata.get("criterion", "loss-gradient"),
            },
        )
    )
    save_checkpoint(net, out, new_record, tokenizer_source=model, overwrite=overwrite)
    return new_record


def _check_widths(config, heads_width, allocation: str) -> None:
    """Fail before loading any weights when the settings cannot work."""
    record = read_record(config)
    check_order("pruning", record)
    adapter = get_adapter(config)
    units, noun = adapter.num_units(config), adapter.unit_noun(config)
    if heads_for_width(units, heads_width) < 1:
        raise GhostifyError(
            f"width {heads_width} keeps no {noun} of {units} (floor({units} x {heads_width}) = 0); "
            f"the smallest width is 1/{units}"
        )
    if allocation not in ALLOCATIONS:
        raise GhostifyError(f"unknown --allocation {allocation!r}; choose one of {', '.join(ALLOCATIONS)}")


def _scores(net, model: str | os.PathLike, importance: str | os.PathLike | None) -> tuple[ImportanceScores, str]:
    if importance is not None:
        return ImportanceScores.load(importance), str(importance)
    own = Path(model) / SCORES_NAME
    if own.is_file():
        return ImportanceScores.load(own), str(own)
    warnings.warn(
        f"no importance scores in {model} and no --importance given: pruning by weight magnitude (data-free); "
        "run `ghostify importance` first for loss-based scores",
        stacklevel=3,
    )
    return magnitude_importance(net, get_adapter(net.config)), "weight-magnitude"

