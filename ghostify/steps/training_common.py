"""What the training commands share: task data, classifiers, and saving the trained student."""

from __future__ import annotations

import copy
import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint import load_config, load_model, model_record, write_checkpoint
from ..data import TaskPreset, label_kind, load_split, padding_collator, resolve_task, tokenize
from ..data.sop import add_sop_inputs, sop_collator
from ..errors import GhostifyError
from ..flatten import flat_settings
from ..heads import classifier_labels
from ..methods.ghost import freeze_except_ghosts
from ..record import history_entry
from ..settings import DataSettings, check_train_mode
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


@flat_settings
def task_inputs(
    tokenizer_source: str | os.PathLike,
    data: DataSettings,
    *,
    seed: int,
    evaluate: bool,
    require_labels: bool = True,
    sop: bool = False,
) -> TaskInputs:
    """The tokenised training rows of ``data`` (with sentence-order-prediction inputs when ``sop``),
    the validation set when ``evaluate``, and a padding collator."""
    preset = resolve_task(data.task, text_columns=data.text_columns, label_column=data.label_column, metric=data.metric)
    tokenizer = load_tokenizer(tokenizer_source)
    train = load_split(data.dataset, preset, "train", max_samples=data.max_samples, seed=seed, require_labels=require_labels)
    if not preset.num_labels:
        preset = with_inferred_labels(preset, train)
    evaluation = None
    if evaluate:
        validation = load_split(data.dataset, preset, preset.validation_split)
        evaluation = Evaluation(
            rows=tokenize(validation, tokenizer, max_length=data.max_length),
            metric=preset.metric,
            regression=preset.is_regression,
            select=main_metric(preset.metric),
        )
    rows, collate = tokenize(train, tokenizer, max_length=data.max_length), padding_collator(tokenizer)
    if sop:
        rows = add_sop_inputs(rows, train, tokenizer, max_length=data.max_length, seed=seed)
        collate = sop_collator(collate, tokenizer)
    return TaskInputs(
        preset=preset,
        tokenizer=tokenizer,
        train_rows=rows,
        evaluation=evaluation,
        collate=collate,
        identity={"dataset": str(data.dataset), "task": preset.name, "train": train.describe()},
    )


def with_inferred_labels(preset: TaskPreset, data) -> TaskPreset:
    """``preset`` (of a dataset without one) with the label count and metric its labels imply."""
    kind = label_kind(data.rows, preset.label_column, dataset=data.dataset)
    metric = preset.metric or ("pearson_spearman" if kind.regression else "accuracy")
    return replace(preset, num_labels=kind.num_labels, metric=metric)


def plain_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` as JSON values (paths as strings), for the run's identity."""
    return {k: (str(v) if v is not None and not isinstance(v, (int, float, str, bool)) else v) for k, v in arguments.items()}


def load_classifier(source: str | os.PathLike, preset: TaskPreset, *, role: str, need_trained_head: bool,
                    dropout: float | None = None, attention_dropout: float | None = None) -> nn.Module:
    """``source`` with a sequence-classification head for ``preset`` (fresh when it has none),
    with its dropout probabilities replaced where given (they are saved with the trained model)."""
    labels = classifier_labels(load_config(source))
    has_head = labels is not None
    if has_head and labels != preset.num_labels:
        raise GhostifyError(
            f"{role} {source} classifies into {labels} labels but task {preset.name} has "
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
    check_train_mode(train)
    if not model_record(model).ghost:
        raise GhostifyError("--train ghost-only needs a model with ghost modules; run `ghostify attach-ghost` first")
    freeze_except_ghosts(model)
