"""``ghostify distill``: GhostBERT's layer-wise distillation from a teacher into a student."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..architectures import get_adapter
from ..data import DEFAULT_DATASET
from ..files import check_disjoint, check_output_dir
from ..seeding import seed_everything
from ..training.layer_map import build_layer_map
from ..training.loop import TrainResult, TrainSettings, partial_dir
from ..training.loop import train as run_training
from ..training.objectives import DistillObjective, DistillWeights
from ..training.reference_distill import ReferenceDistillObjective, check_reference_options, prepare_references
from .common import check_max_length, check_same_tokenizer
from .finetune import _plain
from .training_common import check_dropout, check_optimizer, load_classifier, set_trainable, student_saver, task_inputs


def distill(
    teacher: str | os.PathLike,
    student: str | os.PathLike,
    output: str | os.PathLike,
    *,
    task: str | None = None,
    dataset: str = DEFAULT_DATASET,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    metric: str | None = None,
    max_length: int = 128,
    max_samples: int | None = None,
    emb_weight: float = 1.0,
    mha_weight: float = 1.0,
    ffn_weight: float = 1.0,
    attention_weight: float = 0.0,
    logit_weight: float = 0.0,
    temperature: float = 1.0,
    sop_weight: float = 0.0,
    references: bool = False,
    reference_delta: float = 0.01,
    layer_map: str | None = None,
    train: str = "all",
    dropout: float | None = None,
    attention_dropout: float | None = None,
    epochs: int = 3,
    batch_size: int = 32,
    learning_rate: float = 2e-5,
    weight_decay: float = 0.0,
    warmup_ratio: float = 0.0,
    max_grad_norm: float = 1.0,
    gradient_accumulation_steps: int = 1,
    mixed_precision: str = "no",
    seed: int = 0,
    checkpoint_steps: int = 200,
    resume: bool = False,
    overwrite: bool = False,
    on_step=None,
) -> TrainResult:
    """Distill ``teacher`` into ``student`` on ``task``'s training texts (labels are not used).

    With ``logit_weight > 0`` the student is evaluated after every epoch and the best one kept;
    otherwise the last one is written. Projections between different hidden sizes are saved in
    ``distill_projections.safetensors`` next to the student (with the SOP classifier when
    ``sop_weight > 0``: ALBERT's sentence-order prediction on pairs or multi-sentence texts).
    ``dropout`` / ``attention_dropout`` replace the student's dropout probabilities.
    ``references`` (RefBERT): the student's first layer also attends to the teacher's pre-computed
    representations of the most similar other training example, with weights shifted by
    ``reference_delta``; the store is saved in the output (``references.safetensors``).

    Example:
        >>> distill("out/teacher", "out/ghost", "out/distilled", task="sst2")  # doctest: +SKIP
    """
    settings = TrainSettings(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, weight_decay=weight_decay,
                             warmup_ratio=warmup_ratio, max_grad_norm=max_grad_norm,
                             gradient_accumulation_steps=gradient_accumulation_steps, mixed_precision=mixed_precision,
                             seed=seed, checkpoint_steps=checkpoint_steps)
    settings.validate()
    weights = DistillWeights(emb_weight=emb_weight, mha_weight=mha_weight, ffn_weight=ffn_weight,
                             attention_weight=attention_weight, logit_weight=logit_weight, temperature=temperature,
                             sop_weight=sop_weight)
    weights.validate()
    check_dropout(dropout, attention_dropout)
    check_reference_options(references, reference_delta, sop_weight)
    inputs = (("--teacher", teacher), ("--student", student), ("--dataset", dataset))
    check_output_dir(output, overwrite=overwrite or resume, inputs=inputs)
    check_disjoint([partial_dir(Path(output))], inputs)  # where the run's state lives meanwhile
    check_optimizer(weight_decay=weight_decay, max_grad_norm=max_grad_norm, max_samples=max_samples)
    check_max_length(max_length, teacher, student)
    check_same_tokenizer(teacher, student)  # before any model is loaded or OUT.partial made
    seed_everything(seed)  # before new heads, projections, the SOP classifier and the reference map are drawn
    data = task_inputs(student, dataset=dataset, task=task, text_columns=text_columns, label_column=label_column, metric=metric,
                       max_length=max_length, max_samples=max_samples, seed=seed, evaluate=logit_weight > 0,
                       require_labels=False, sop=sop_weight > 0)
    teacher_model = load_classifier(teacher, data.preset, role="teacher", need_trained_head=logit_weight > 0)
    student_model = load_classifier(student, data.preset, role="student", need_trained_head=False, dropout=dropout,
                                    attention_dropout=attention_dropout)
    train_rows, reference_module = data.train_rows, None
    if references:  # before set_trainable: the teacher→student map is part of the student
        train_rows, reference_module = prepare_references(student_model, teacher_model, data.train_rows, data.collate,
                                                          delta=reference_delta, teacher_source=str(teacher))
    set_trainable(student_model, train)
    mapping = build_layer_map(_depth(student_model), _depth(teacher_model), layer_map)
    objective = DistillObjective(student_model, teacher_model, weights=weights, layer_map=mapping,
                                 regression=data.preset.is_regression) if not references else \
        ReferenceDistillObjective(student_model, teacher_model, weights=weights, layer_map=mapping,
                                  regression=data.preset.is_regression, references=reference_module)
    arguments: dict[str, Any] = {
        "teacher": str(teacher), "student": str(student), "task": data.preset.name, "dataset": dataset,
        "layer_map": mapping.describe(), "train": train, "max_samples": max_samples, "max_length": max_length,
        "dropout": dropout, "attention_dropout": attention_dropout,
        **({"references": True, "reference_delta": reference_delta} if references else {}),
        **vars(weights), **vars(settings),
    }
    return run_training(objective, train_rows, data.collate, settings, output,
                 student_saver(student_model, "distill", arguments, student), evaluation=data.evaluation,
                 identity={**data.identity, "arguments": _plain(arguments)},
                 resume=resume, overwrite=overwrite, on_step=on_step, describe="distill")


def _depth(model) -> int:
    """Layer applications in one forward pass (ALBERT's shared layer counts each time it runs)."""
    return sum(get_adapter(model.config).layer_applications(model))
