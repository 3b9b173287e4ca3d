"""``ghostify importance``: score heads and FFN neurons by their impact on the loss."""

from __future__ import annotations

import os
import warnings

from ..architectures import get_adapter
from ..checkpoint import is_local, load_config, load_model, model_record, save_checkpoint
from ..data import load_split
from ..files import check_output_dir
from ..flatten import checks_arguments, flat_settings
from ..methods.pruning import SCORES_NAME, ImportanceScores, compute_importance
from ..record import history_entry
from ..seeding import seed_everything
from ..settings import DataSettings, ImportanceDefaults, TaskSettings
from ..tasks import dataset_for
from .common import check_max_length, check_positive, default_device, load_tokenizer
from .examples import data_description
from .training_common import task_kind

SPLIT = "train"  # scores come from training data only: pruning on validation data leaks it


@flat_settings
def importance(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    dataset: str = DataSettings.dataset,
    task: str | None = None,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    task_settings: TaskSettings = TaskSettings(),
    samples: int | None = ImportanceDefaults.samples,
    batch_size: int = ImportanceDefaults.batch_size,
    max_length: int = DataSettings.max_length,
    label_free: bool = False,
    seed: int = ImportanceDefaults.seed,
    overwrite: bool = False,
    progress=None,
) -> ImportanceScores:
    """Score ``model`` on ``samples`` training examples and write it with the scores to ``output``.
    The loss is the task kind's (``ghostify.tasks``): a sequence, token or answer-span
    cross-entropy, or the embeddings task's label-free one. The output's weights file is a hard
    link of the input's (a copy across devices) when the input is a local checkpoint that holds
    exactly the weights ghostify would write: the scores add kilobytes, not the model's size.

    Example:
        >>> importance("models/bert-sst2", "out/scored", task="sst2", samples=1024)  # doctest: +SKIP
    """
    kind = task_kind(DataSettings(task=task, dataset=dataset, text_columns=text_columns, label_column=label_column,
                                  max_length=max_length), task_settings)
    dataset = dataset_for(kind.preset, dataset)
    out = check_output_dir(output, overwrite=overwrite, inputs=(model, ("--dataset", dataset)))
    check_arguments(samples=samples, batch_size=batch_size)
    check_max_length(max_length, model)
    kind.for_model(load_config(model))
    label_free = label_free or not kind.needs_labels
    data = load_split(dataset, kind.preset, SPLIT, max_samples=samples, seed=seed, require_labels=not label_free,
                      without_labels="score without labels with --label-free")
    preset = kind.with_data(data)
    # label-free scores need no trained head: they measure how the model's own predictive
    # distribution moves (with a fresh head, that of a random projection of the encoder's output)
    if kind.head_labels(load_config(model)) is None and not label_free:
        warnings.warn(
            f"{model} has no trained {kind.noun} head: scores come from a randomly initialised one; "
            "fine-tune on the task first for meaningful scores, or score without labels (--label-free)",
            stacklevel=2,
        )
    tokenizer = load_tokenizer(model)
    device = default_device()
    seed_everything(seed)  # a missing task head is drawn next
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fresh-head warning was given above, in plainer words
        scorer = kind.load(model, role="model", need_trained_head=False).to(device)
    rows = kind.encode(data, tokenizer)
    if label_free and "labels" in rows.column_names:
        rows = rows.remove_columns("labels")

    def loss(net, batch, generator):
        return kind.per_example_loss(kind.outputs(net, batch), batch, label_free=label_free, generator=generator)

    from torch.utils.data import DataLoader

    scores = compute_importance(
        scorer,
        get_adapter(scorer.config),
        DataLoader(rows, batch_size=batch_size, collate_fn=kind.collator(tokenizer)),
        label_free=label_free,
        seed=seed,
        progress=progress,
        loss=loss,
    )
    scores.metadata.update(data.describe())
    scores.metadata["label_free"] = label_free
    # what `prune --tune-masks` reads again: the same data, encoded the same way
    scores.metadata["data"] = recorded_data(task=task, dataset=dataset, text_columns=text_columns,
                                            label_column=label_column, max_length=max_length, task_settings=task_settings)
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
        weights_from=model if is_local(model) else None,
    )
    return scores


def check_arguments(*, samples: int | None = ImportanceDefaults.samples, batch_size: int = ImportanceDefaults.batch_size,
                    **_: object) -> None:
    """What :func:`importance` refuses of its arguments before reading anything."""
    check_positive(samples=samples, batch_size=batch_size)


checks_arguments(importance, check_arguments)


def recorded_data(*, dataset: str = DataSettings.dataset, task: str | None = None,
                  text_columns: tuple[str, ...] | None = None, label_column: str | None = None,
                  max_length: int = DataSettings.max_length, task_settings: TaskSettings = TaskSettings(),
                  **_: object) -> dict:
    """What :func:`importance` records of the data it scores on (the scores' ``metadata["data"]``), which ``prune
    --tune-masks`` reads again; a recipe reads it from an importance stage's settings before any stage runs."""
    return data_description(DataSettings(task=task, dataset=dataset, text_columns=text_columns,
                                          label_column=label_column, max_length=max_length), task_settings)
