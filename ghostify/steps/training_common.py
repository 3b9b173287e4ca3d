"""What the training commands share: task data, classifiers, and saving the trained student."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint import load_config, model_record, write_checkpoint
from ..data import TaskPreset, load_split, resolve_task
from ..data.readers import is_data_file
from ..data.sop import add_sop_inputs, sop_collator
from ..errors import GhostifyError
from ..flatten import flat_settings
from ..methods.ghost import freeze_except_ghosts
from ..record import history_entry
from ..settings import DataSettings, TaskSettings, check_train_mode
from ..tasks import TaskKind, dataset_for, kind_for
from ..training.loop import Evaluation, process_count
from .common import load_tokenizer

PROJECTIONS_NAME = "distill_projections.safetensors"


@dataclass
class TaskInputs:
    preset: TaskPreset
    kind: TaskKind
    tokenizer: Any
    train_rows: Any
    evaluation: Evaluation | None
    collate: Any
    identity: dict[str, Any]


def task_kind(data: DataSettings, task: TaskSettings) -> TaskKind:
    """The kind of task ``data`` names (with ``task``'s columns), before any data is read."""
    data.validate()
    task.validate()
    preset = resolve_task(data.task, text_columns=data.text_columns, label_column=data.label_column, metric=data.metric,
                          columns=task.columns(), columns_from_data=is_data_file(data.dataset))
    return kind_for(preset, data, task)


@flat_settings
def task_inputs(
    tokenizer_source: str | os.PathLike,
    data: DataSettings,
    task_settings: TaskSettings = TaskSettings(),
    *,
    seed: int,
    evaluate: bool,
    require_labels: bool = True,
    sop: bool = False,
) -> TaskInputs:
    """The tokenised training rows of ``data`` (with sentence-order-prediction inputs when ``sop``),
    the validation set when ``evaluate``, and the collator, as the task's kind encodes them."""
    kind = task_kind(data, task_settings).for_model(load_config(tokenizer_source))
    dataset = dataset_for(kind.preset, data.dataset)
    if sop and kind.name != "classification":
        raise GhostifyError(f"--sop-weight needs sentences; the {kind.preset.name} task has "
                            f"{'words' if kind.name == 'tokens' else 'questions and contexts'}: distill with --sop-weight 0")
    if sop and task_settings.chunks is not None:  # one segment pair per text, not per window
        raise GhostifyError(f"--sop-weight cuts each text into two segments, not its --chunks windows: distill with "
                            "--sop-weight 0, or leave --chunks unset")
    tokenizer = load_tokenizer(tokenizer_source)
    train = load_split(dataset, kind.preset, "train", max_samples=data.max_samples, seed=seed,
                       require_labels=require_labels)
    preset = kind.with_data(train)
    evaluation = None
    if evaluate:
        evaluation = kind.evaluation(load_split(dataset, preset, preset.validation_split,
                                                validation_file=data.validation_file), tokenizer)
    rows, collate = kind.encode(train, tokenizer), kind.collator(tokenizer)
    if sop:
        rows = add_sop_inputs(rows, train, tokenizer, max_length=data.max_length, seed=seed)
        collate = sop_collator(collate, tokenizer)
    return TaskInputs(
        preset=preset,
        kind=kind,
        tokenizer=tokenizer,
        train_rows=rows,
        evaluation=evaluation,
        collate=collate,
        identity={"dataset": str(dataset), "task": preset.name, "train": train.describe()},
    )


def plain_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` as JSON values (paths as strings), for the run's identity."""
    return {k: (str(v) if v is not None and not isinstance(v, (int, float, str, bool)) else v) for k, v in arguments.items()}


def student_saver(student: nn.Module, command: str, arguments: dict[str, Any], tokenizer_source: str | os.PathLike):
    """A ``save_student`` for the loop: the student keeps the ghostify record it had before
    training, plus one history step (however often the best checkpoint is saved)."""
    before = model_record(student)

    def save(student: nn.Module, directory: Path, extra: dict[str, torch.Tensor],
             state: dict[str, torch.Tensor] | None = None) -> None:
        record = copy.deepcopy(before)
        # how many processes trained: a launch that fell back to one is visible in the history
        record.history.append({**history_entry(command, arguments), "processes": process_count()})
        files = {}
        if extra:
            from safetensors.torch import save_file

            files[PROJECTIONS_NAME] = lambda path: save_file(extra, str(path))
        write_checkpoint(student, directory, record, tokenizer_source=tokenizer_source, extra_files=files, state=state)

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
