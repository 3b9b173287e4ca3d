"""``ghostify importance``: score heads and FFN neurons by their impact on the loss."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from ..architectures import get_adapter
from ..checkpoint import load_config, load_model, model_record, save_checkpoint
from ..data import batches, label_kind, load_split, resolve_task
from ..errors import GhostifyError
from ..files import check_output_dir
from ..heads import classifier_labels
from ..methods.pruning import SCORES_NAME, ImportanceScores, compute_importance
from ..record import history_entry
from ..seeding import seed_everything
from ..settings import DataSettings
from .common import check_max_length, check_positive, default_device, load_tokenizer

SPLIT = "train"  # scores come from training data only: pruning on validation data leaks it


def importance(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    dataset: str = DataSettings.dataset,
    task: str | None = None,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    samples: int | None = 2048,
    batch_size: int = 32,
    max_length: int = DataSettings.max_length,
    label_free: bool = False,
    seed: int = 0,
    overwrite: bool = False,
    progress=None,
) -> ImportanceScores:
    """Score ``model`` on ``samples`` training examples and write it with the scores to ``output``.

    Example:
        >>> importance("models/bert-sst2", "out/scored", task="sst2", samples=1024)  # doctest: +SKIP
    """
    out = check_output_dir(output, overwrite=overwrite, inputs=(model, ("--dataset", dataset)))
    check_positive(samples=samples, batch_size=batch_size)
    check_max_length(max_length, model)
    preset = resolve_task(task, text_columns=text_columns, label_column=label_column)
    data = load_split(dataset, preset, SPLIT, max_samples=samples, seed=seed, require_labels=not label_free)
    config = load_config(model)
    num_labels = preset.num_labels or (_infer_num_labels(data) if data.has_labels else config.num_labels)
    existing = classifier_labels(config)
    has_classifier = existing is not None
    if has_classifier and existing != num_labels:
        raise GhostifyError(
            f"{model} classifies into {existing} labels but task {preset.name} has {num_labels}; "
            "score a model fine-tuned on this task"
        )
    if not has_classifier:
        warnings.warn(
            f"{model} has no trained classification head: scores come from a randomly initialised one; "
            "fine-tune on the task first for meaningful scores",
            stacklevel=2,
        )
    tokenizer = load_tokenizer(model)
    device = default_device()
    seed_everything(seed)  # a missing classification head is drawn next
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fresh-head warning was given above, in plainer words
        scorer = load_model(
            model,
            head="sequence-classification",
            num_labels=num_labels,
            problem_type="regression" if num_labels == 1 else "single_label_classification",
        ).to(device)
    scores = compute_importance(
        scorer,
        get_adapter(scorer.config),
        batches(data, tokenizer, batch_size=batch_size, max_length=max_length),
        label_free=label_free,
        seed=seed,
        progress=progress,
    )
    scores.metadata.update(data.describe())
    scores.metadata["label_free"] = label_free
    del scorer

    original = load_model(model)
    record = model_record(original)
    record.history.append(
        history_entry(
            "importance",
            {
                "model": str(model),
                "dataset": dataset,
                "task": preset.name,
                "samples": data.num_samples,
                "batch_size": batch_size,
                "max_length": max_length,
                "label_free": label_free,
                "seed": seed,
                "sha256": scores.metadata["sha256"],
            },
        )
    )
    save_checkpoint(
        original,
        out,
        record,
        tokenizer_source=model,
        extra_files={SCORES_NAME: scores.save},
        overwrite=overwrite,
    )
    return scores


def _infer_num_labels(data) -> int:
    return label_kind(data.rows, data.task.label_column, dataset=data.dataset).num_labels


def importance_path(model: str | os.PathLike) -> Path | None:
    path = Path(model) / SCORES_NAME
    return path if path.is_file() else None

