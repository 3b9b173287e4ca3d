"""What ``distill --references`` adds to distillation: the teacher's reference store over the
training texts, each example's teacher-chosen reference (passed through the batch as
``reference``), and reference attention on the student's first layer."""

from __future__ import annotations

import copy
from typing import Any

from torch import nn

from ..architectures import get_adapter
from ..checkpoint import model_record
from ..errors import GhostifyError
from ..methods.references import build_store, check_delta, install_references, reference_record
from ..record import RECORD_KEY
from .objectives import DistillObjective

REFERENCE_COLUMN = "reference"


def check_reference_options(references: bool, delta: float, sop_weight: float) -> None:
    if not references:
        return
    check_delta(delta)
    if sop_weight > 0:
        raise GhostifyError("--references with --sop-weight is not supported (the sentence-order inputs have no "
                            "references); distill with --sop-weight 0, or without --references")


def prepare_references(student: nn.Module, teacher: nn.Module, rows, collate, *, delta: float, teacher_source: str):
    """Build the store with ``teacher`` over ``rows``, install reference attention on ``student``
    (recorded in its config's record) and return the rows with each example's reference index."""
    if len(rows) < 2:
        raise GhostifyError(f"--references needs at least 2 training examples (each references another), got {len(rows)}")
    t_hidden = get_adapter(teacher.config).hidden_size(teacher.config)
    s_hidden = get_adapter(student.config).hidden_size(student.config)
    store = build_store(teacher, rows, collate)
    module = install_references(student, teacher_hidden=t_hidden, delta=delta)
    module.load_store(store, next(student.parameters()).device)
    record = copy.deepcopy(model_record(student))
    record.methods["references"] = reference_record(module, teacher=teacher_source, teacher_hidden=t_hidden, student_hidden=s_hidden)
    setattr(student.config, RECORD_KEY, record.to_dict())
    return rows.add_column(REFERENCE_COLUMN, store.neighbours.tolist()), module


class ReferenceDistillObjective(DistillObjective):
    """Distillation whose student attends to each example's teacher-chosen reference."""

    def __init__(self, *args: Any, references, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "_references", references)  # lives inside the student already

    def forward(self, batch: dict):
        batch = dict(batch)
        index = batch.pop(REFERENCE_COLUMN)
        with self._references.given(index):
            return super().forward(batch)
