"""``ghostify distill``: GhostBERT's layer-wise distillation from a teacher into a student."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..architectures import get_adapter
from ..augment.masking import check_copies
from ..checkpoint import load_config
from ..errors import GhostifyError
from ..files import check_disjoint, check_output_dir
from ..flatten import checks_arguments, flat_settings
from ..methods.references import check_reference_family
from ..methods import by_name
from ..seeding import seed_everything
from ..settings import (DataSettings, DistillDefaults, DistillWeights, StudentSettings, TaskSettings,
                        TeacherStoreSettings, TrainSettings)
from ..training.layer_map import build_layer_map, kept_layers
from ..training.loop import Deadline, TrainResult, partial_dir
from ..training.loop import train as run_training
from ..training.objectives import DistillObjective
from ..training.sharding import launched_engine
from ..training.reference_distill import ReferenceDistillObjective, check_reference_options, prepare_references
from .common import check_max_length, check_same_tokenizer
from .training_common import (check_store, keep_teacher_outputs, plain_arguments, set_trainable, student_saver,
                              task_inputs, task_kind)

#: RefBERT's settings (``--references``, ``--reference-delta``), declared by the method
REFERENCES = by_name("references").settings


@flat_settings
def distill(
    teacher: str | os.PathLike,
    student: str | os.PathLike,
    output: str | os.PathLike,
    *,
    data: DataSettings = DataSettings(),
    task_settings: TaskSettings = TaskSettings(),
    losses: DistillWeights = DistillWeights(),
    references: bool = REFERENCES.references,
    reference_delta: float = REFERENCES.reference_delta,
    layer_map: str | None = None,
    unlabelled: str | os.PathLike | None = None,
    masked_copies: int = DistillDefaults.masked_copies,
    student_settings: StudentSettings = StudentSettings(),
    training: TrainSettings = TrainSettings(),
    store: TeacherStoreSettings = TeacherStoreSettings(),
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[int], None] | None = None,
    deadline: Deadline | None = None,
) -> TrainResult:
    """Distill ``teacher`` into ``student`` on ``data``'s training texts (labels are not used), and on the texts of
    the file ``unlabelled`` when given (``--max-samples`` then draws from both), and on ``masked_copies`` copies of
    those texts with some words replaced by the mask token (:mod:`ghostify.augment.masking`).

    With ``losses.logit_weight > 0`` the student is evaluated after every epoch and the best one
    kept; otherwise the last one is written. Projections between different hidden sizes are saved in
    ``distill_projections.safetensors`` next to the student (with the SOP classifier when
    ``losses.sop_weight > 0``: ALBERT's sentence-order prediction on pairs or multi-sentence texts).
    ``student_settings`` choose what trains and replace the student's dropout probabilities.
    ``references`` (RefBERT): the student's first layer also attends to the teacher's pre-computed
    representations of the most similar other training example, with weights shifted by
    ``reference_delta``; the store is saved in the output (``references.safetensors``). ``store``: where the
    teacher's outputs are kept once computed (:class:`~ghostify.settings.TeacherStoreSettings`). Any field
    of the settings may instead be given as a flat keyword (``task="sst2", logit_weight=1.0``).

    Example:
        >>> distill("out/teacher", "out/ghost", "out/distilled", data=DataSettings(task="sst2"),
        ...         losses=DistillWeights(attention_weight=1.0), training=TrainSettings(epochs=1))  # doctest: +SKIP
    """
    check_arguments(training=training, losses=losses, student_settings=student_settings, data=data,
                    task_settings=task_settings, store=store, references=references, reference_delta=reference_delta,
                    unlabelled=unlabelled, masked_copies=masked_copies)
    if references and launched_engine() is not None:
        raise GhostifyError("--references (RefBERT) is not supported under an FSDP or DeepSpeed launch config: the "
                            "reference store is refitted on the whole student when it is saved; distill with "
                            "data parallelism (accelerate launch --multi_gpu) or without --references")
    inputs = (("--teacher", teacher), ("--student", student), ("--dataset", data.dataset),
              ("--unlabelled", unlabelled))
    check_output_dir(output, overwrite=overwrite or resume, inputs=inputs)
    check_disjoint([partial_dir(Path(output))], inputs)  # where the run's state lives meanwhile
    check_store(store, output, inputs)
    check_max_length(data.max_length, teacher, student)
    check_same_tokenizer(teacher, student)  # before any model is loaded or OUT.partial made
    if references:
        student_config = load_config(student)
        check_reference_family(get_adapter(student_config), student_config)
    kind = task_kind(data, task_settings)
    if references and kind.name != "classification":
        raise GhostifyError(f"--references (RefBERT) retrieves whole-sentence references; the {kind.preset.name} task "
                            "is not sentence classification: distill without --references")
    seed_everything(training.seed)  # before new heads, projections, the SOP classifier and the reference map are drawn
    evaluate = losses.logit_weight > 0 and kind.evaluates_while_training()
    task = task_inputs(student, data, task_settings, seed=training.seed, evaluate=evaluate, require_labels=False,
                       sop=losses.sop_weight > 0, unlabelled=None if unlabelled is None else str(unlabelled),
                       masked_copies=masked_copies)
    teacher_model = task.kind.load(teacher, role="teacher", need_trained_head=losses.logit_weight > 0)
    student_model = task.kind.load(student, role="student", need_trained_head=False, dropout=student_settings.dropout,
                                   attention_dropout=student_settings.attention_dropout)
    train_rows, reference_module = task.train_rows, None
    if references:  # before set_trainable: the teacher→student map is part of the student
        train_rows, reference_module = prepare_references(student_model, teacher_model, task.train_rows, task.collate,
                                                          delta=reference_delta, teacher_source=str(teacher))
    set_trainable(student_model, student_settings.train)
    mapping = build_layer_map(_depth(student_model), _depth(teacher_model), layer_map,
                              kept=kept_layers(student_model, _depth(teacher_model)))  # a drop-layers student
    # where a store keeps the teacher's outputs, its logits go in too (free: the teacher computes them) for a
    # fine-tune with the same teacher and store to read; not those of a head the teacher was never trained with
    keep_outputs = store.wanted(training.epochs) and task.kind.head_labels(load_config(teacher)) is not None
    objective = DistillObjective(student_model, teacher_model, weights=losses, layer_map=mapping,
                                 kind=task.kind, keep_outputs=keep_outputs) if not references else \
        ReferenceDistillObjective(student_model, teacher_model, weights=losses, layer_map=mapping,
                                  kind=task.kind, references=reference_module, keep_outputs=keep_outputs)
    train_rows, collate = keep_teacher_outputs(objective, train_rows, task.collate, teacher, store, training)
    # the history's flat keys, as the CLI flags name them
    arguments: dict[str, Any] = {
        "teacher": str(teacher), "student": str(student), "task": task.preset.name, "dataset": task.identity["dataset"],
        "layer_map": mapping.describe(), "train": student_settings.train, "max_samples": data.max_samples,
        **({"unlabelled": str(unlabelled)} if unlabelled is not None else {}),
        **({"masked_copies": masked_copies} if masked_copies else {}),
        "max_length": data.max_length, "dropout": student_settings.dropout,
        "attention_dropout": student_settings.attention_dropout,
        **({"references": True, "reference_delta": reference_delta} if references else {}),
        **asdict(losses), **asdict(training), **asdict(store),
    }
    return run_training(objective, train_rows, collate, training, output,
                        student_saver(student_model, "distill", arguments, student), evaluation=task.evaluation,
                        identity={**task.identity, "arguments": plain_arguments(arguments)},
                        resume=resume, overwrite=overwrite, on_step=on_step, describe="distill",
                        deadline=deadline)


def _depth(model) -> int:
    """Layer applications in one forward pass (ALBERT's shared layer counts each time it runs)."""
    return sum(get_adapter(model.config).layer_applications(model))


def check_arguments(*, training: TrainSettings = TrainSettings(), losses: DistillWeights = DistillWeights(),
                    student_settings: StudentSettings = StudentSettings(), data: DataSettings = DataSettings(),
                    task_settings: TaskSettings = TaskSettings(), store: TeacherStoreSettings = TeacherStoreSettings(),
                    references: bool = REFERENCES.references, reference_delta: float = REFERENCES.reference_delta,
                    unlabelled: str | os.PathLike | None = None, masked_copies: int = DistillDefaults.masked_copies,
                    **_: object) -> None:
    """What :func:`distill` refuses of its arguments before reading anything."""
    for settings in (training, losses, student_settings, data, task_settings, store):
        settings.validate()
    check_copies(masked_copies)
    check_reference_options(references, reference_delta, losses.sop_weight)
    if references or losses.sop_weight > 0:
        # texts that are not the training split's have no references to retrieve and no segment order to predict
        missing, fix = ("references", "--no-references") if references else ("segment order", "--sop-weight 0")
        for flag, value, without in (("--masked-copies", masked_copies or None, "--masked-copies 0"),
                                     ("--unlabelled", unlabelled, "without --unlabelled")):
            if value is not None:
                raise GhostifyError(f"{flag} {value} adds texts without {missing}; distill with {fix}, or {without}")


checks_arguments(distill, check_arguments)

