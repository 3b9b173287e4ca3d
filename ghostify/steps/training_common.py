"""What the training commands share: task data, classifiers, and saving the trained student."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint import load_config, load_model, model_record, write_checkpoint
from ..data import TaskPreset, label_kind, load_split, padding_collator, resolve_task, tokenize
from ..data.sop import add_sop_inputs, sop_collator
from ..errors import GhostifyError
from ..methods.ghost import freeze_except_ghosts
from ..record import history_entry
from ..training.loop import Evaluation
from ..training.metrics import main_metric
from .common import load_tokenizer

PROJECTIONS_NAME = "distill_projections.safetensors"


@dataclass
class TaskInputs:
    preset: TaskPreset
    tokenizer: Any
    train_rows: Any
    evaluation: Evaluation | None
    collate: Any
    identity: dict[str, Any]


def task_inputs(
    tokenizer_source: str | os.PathLike,
    *,
    dataset: str,
    task: str | None,
    text_columns: tuple[str, ...] | None,
    label_column: str | None,
    metric: str | None = None,
    max_length: int = 128,
    max_samples: int | None,
    seed: int,
    evaluate: bool,
    require_labels: bool = True,
    sop: bool = False,
) -> TaskInputs:
    """The tokenised training rows (with sentence-order-prediction inputs when ``sop``), the
    validation set when ``evaluate``, and a padding collator."""
    preset = resolve_task(task, text_columns=text_columns, label_column=label_column, metric=metric)
    tokenizer = load_tokenizer(tokenizer_source)
    train = load_split(dataset, preset, "train", max_samples=max_samples, seed=seed, require_labels=require_labels)
    if not preset.num_labels:
        preset = _with_inferred_labels(preset, train)
    evaluation = None
    if evaluate:
        validation = load_split(dataset, preset, preset.validation_split)
        evaluation = Evaluation(
            rows=tokenize(validation, tokenizer, max_length=max_length),
            metric=preset.metric,
            regression=preset.is_regression,
            select=main_metric(preset.metric),
        )
    rows, collate = tokenize(train, tokenizer, max_length=max_length), padding_collator(tokenizer)
    if sop:
        rows = add_sop_inputs(rows, train, tokenizer, max_length=max_length, seed=seed)
        collate = sop_collator(collate, tokenizer)
    return TaskInputs(
        preset=preset,
        tokenizer=tokenizer,
        train_rows=rows,
        evaluation=evaluation,
        collate=collate,
        identity={"dataset": str(dataset), "task": preset.name, "train": train.describe()},
    )


def _with_inferred_labels(preset: TaskPreset, data) -> TaskPreset:
    from dataclasses import replace

    kind = label_kind(data.rows, preset.label_column, dataset=data.dataset)
    regression, num_labels = kind.regression, kind.num_labels
    metric = preset.metric or ("pearson_spearman" if regression else "accuracy")
    return replace(preset, num_labels=num_labels, metric=metric)


def check_optimizer(*, weight_decay: float, max_grad_norm: float, max_samples: int | None) -> None:
    """What TrainSettings leaves open and no one can mean."""
    if not weight_decay >= 0:
        raise GhostifyError(f"--weight-decay {weight_decay} must be 0 or more (the paper: 0)")
    if not max_grad_norm >= 0:
        raise GhostifyError(f"--max-grad-norm {max_grad_norm} must be 0 (off) or more (the paper: 1)")
    if max_samples is not None and (isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1):
        raise GhostifyError(f"--max-samples {max_samples!r} must be at least 1 (or unset: all)")


def check_dropout(dropout: float | None, attention_dropout: float | None) -> None:
    for flag, value in (("--dropout", dropout), ("--attention-dropout", attention_dropout)):
        if value is not None and not 0 <= value < 1:
            raise GhostifyError(f"{flag} {value} must be in [0, 1) (0 turns it off, as ALBERT found works best)")


def load_classifier(source: str | os.PathLike, preset: TaskPreset, *, role: str, need_trained_head: bool,
                    dropout: float | None = None, attention_dropout: float | None = None) -> nn.Module:
    """``source`` with a sequence-classification head for ``preset`` (fresh when it has none),
    with its dropout probabilities replaced where given (they are saved with the trained model)."""
    config = load_config(source)
    architectures = getattr(config, "architectures", None) or []
    has_head = any(a.endswith("ForSequenceClassification") for a in architectures)
    if has_head and config.num_labels != preset.num_labels:
        raise GhostifyError(
            f"{role} {source} classifies into {config.num_labels} labels but task {preset.name} has "
            f"{preset.num_labels}; use a {role} for this task"
        )
    if need_trained_head and not has_head:
        raise GhostifyError(
            f"{role} {source} has no trained classification head; fine-tune it first (ghostify finetune) "
            "or set the prediction-layer weight to 0"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fresh head is expected here and said once below
        model = load_model(
            source,
            head="sequence-classification",
            num_labels=preset.num_labels,
            problem_type="regression" if preset.is_regression else "single_label_classification",
            dropout=dropout,
            attention_dropout=attention_dropout,
        )
    if not has_head and role == "model":
        warnings.warn(f"{source} has no classification head yet: a new one is trained from scratch", stacklevel=3)
    return model


def student_saver(student: nn.Module, command: str, arguments: dict[str, Any], tokenizer_source: str | os.PathLike):
    """A ``save_student`` for the loop: the student keeps the ghostify record it had before
    training, plus one history step (however often the best checkpoint is saved)."""
    import copy

    before = model_record(student)

    def save(student: nn.Module, directory: Path, extra: dict[str, torch.Tensor]) -> None:
        record = copy.deepcopy(before)
        record.history.append(history_entry(command, arguments))
        files = {}
        if extra:
            from safetensors.torch import save_file

            files[PROJECTIONS_NAME] = lambda path: save_file(extra, str(path))
        write_checkpoint(student, directory, record, tokenizer_source=tokenizer_source, extra_files=files)

    return save


def set_trainable(model: nn.Module, train: str) -> None:
    """``all``: every parameter; ``ghost-only``: only the ghost modules (which must exist)."""
    if train == "all":
        model.requires_grad_(True)
        return
    if train != "ghost-only":
        raise GhostifyError(f"--train {train!r}: choose all or ghost-only")
    if not model_record(model).ghost:
        raise GhostifyError("--train ghost-only needs a model with ghost modules; run `ghostify attach-ghost` first")
    freeze_except_ghosts(model)
