"""What the training commands share: task data, classifiers, and saving the trained student."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..augment.masking import masked_copies
from ..checkpoint import load_config, model_record, write_checkpoint
from ..data import TaskData, TaskPreset, load_split, load_unlabelled, resolve_task
from ..data.readers import is_data_file
from ..data.sop import add_sop_inputs, sop_collator
from ..errors import GhostifyError
from ..files import check_disjoint
from ..flatten import flat_settings
from ..methods.ghost import freeze_except_ghosts
from ..record import history_entry
from ..settings import DataSettings, TaskSettings, TeacherStoreSettings, TrainSettings, check_train_mode
from ..tasks import TaskKind, dataset_for, kind_for
from ..training.loop import Evaluation, Objective, process_count
from ..training.teacher_store import TeacherStore, keyed_collator, with_keys
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
    unlabelled: str | None = None,
    masked_copies: int = 0,
) -> TaskInputs:
    """The tokenised training rows of ``data`` (with sentence-order-prediction inputs when ``sop``),
    the validation set when ``evaluate``, and the collator, as the task's kind encodes them. ``unlabelled``: a
    file of more text (:func:`~ghostify.data.load_unlabelled`), read with the training split's text, labels
    unread; ``--max-samples`` then draws from both. ``masked_copies``: that many copies of those texts with some
    words masked follow them, labels unread (:mod:`ghostify.augment.masking`)."""
    kind = task_kind(data, task_settings).for_model(load_config(tokenizer_source))
    dataset = dataset_for(kind.preset, data.dataset)
    if sop and kind.name != "classification":
        raise GhostifyError(f"--sop-weight needs sentences; the {kind.preset.name} task has "
                            f"{'words' if kind.name == 'tokens' else 'questions and contexts'}: distill with --sop-weight 0")
    if sop and task_settings.chunks is not None:  # one segment pair per text, not per window
        raise GhostifyError(f"--sop-weight cuts each text into two segments, not its --chunks windows: distill with "
                            "--sop-weight 0, or leave --chunks unset")
    tokenizer = load_tokenizer(tokenizer_source)
    train = load_split(dataset, kind.preset, "train", max_samples=None if unlabelled else data.max_samples, seed=seed,
                       require_labels=require_labels)
    preset = kind.with_data(train)
    if unlabelled is not None:
        train = with_unlabelled(train, load_unlabelled(unlabelled, preset), data.max_samples, seed)
    if masked_copies:
        train = with_masked_copies(train, tokenizer.mask_token, masked_copies, seed)
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


def with_unlabelled(train: TaskData, extra: TaskData, max_samples: int | None, seed: int) -> TaskData:
    """The training split's texts followed by ``extra``'s, without labels (a seeded subset of ``max_samples`` of
    them all)."""
    import datasets

    columns = list(train.task.input_columns)
    ours = train.rows.select_columns(columns)
    # the same column types (a CSV's strings and a text file's differ in width)
    theirs = extra.rows.select_columns(columns).cast(ours.features)
    rows = datasets.concatenate_datasets([ours, theirs])
    if max_samples is not None and max_samples < len(rows):
        rows = rows.shuffle(seed=seed).select(range(max_samples))
    return TaskData(dataset=f"{train.dataset} + {extra.dataset}", split="train", task=train.task, rows=rows,
                    has_labels=False)


def with_masked_copies(train: TaskData, mask_token: str | None, copies: int, seed: int) -> TaskData:
    """The texts of ``train`` followed by ``copies`` copies of them with some words masked, without labels."""
    import datasets

    if mask_token is None:
        raise GhostifyError(f"--masked-copies {copies} replaces words by the tokenizer's mask token, but this model's "
                            "tokenizer has none: distill with --masked-copies 0")
    columns = list(train.task.input_columns)
    ours = train.rows.select_columns(columns)
    rows = datasets.concatenate_datasets([ours, masked_copies(ours, columns, mask_token, copies, seed)])
    return TaskData(dataset=f"{train.dataset} + {copies} masked cop{'y' if copies == 1 else 'ies'}", split="train",
                    task=train.task, rows=rows, has_labels=False)


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


def check_store(store: TeacherStoreSettings, output: str | os.PathLike, inputs: tuple[Any, ...]) -> None:
    """The store is written: refuse one that is, holds or lies inside an input or the output."""
    store.validate()
    if store.teacher_store is not None:
        check_disjoint([store.teacher_store], (*inputs, ("output", output)), flag="--teacher-store")


def keep_teacher_outputs(objective: Objective, rows: Any, collate: Any, teacher: str | os.PathLike,
                         store: TeacherStoreSettings, training: TrainSettings) -> tuple[Any, Any]:
    """Give ``objective`` a teacher store where the settings want one (:meth:`TeacherStoreSettings.wanted`) and
    the objective can use it: the rows then carry their keys through ``collate``. Returns the rows and collator
    training reads."""
    if not store.wanted(training.epochs) or not getattr(objective, "storable", True):
        return rows, collate
    objective.store = TeacherStore(store.teacher_store, teacher, cap_bytes=int(store.teacher_store_gb * 2**30),
                                   precision=training.teacher_pass_precision)
    return with_keys(rows), keyed_collator(collate)


def set_trainable(model: nn.Module, train: str) -> None:
    """``all``: every parameter; ``ghost-only``: only the ghost modules (which must exist)."""
    if train == "all":
        model.requires_grad_(True)
        return
    check_train_mode(train)
    if not model_record(model).ghost:
        raise GhostifyError("--train ghost-only needs a model with ghost modules; run `ghostify attach-ghost` first")
    freeze_except_ghosts(model)
