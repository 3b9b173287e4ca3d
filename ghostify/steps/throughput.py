"""How fast this machine trains a given student: what ``compress --budget 20m`` sizes its stages by.

A few batches of the task's own training examples go through the work each stage does: the teacher's forward
pass with what distillation compares (the first time a text is read), a distillation step of the student (the
teacher's outputs read back from a store), a fine-tuning step with the teacher's logits read back, and the
student's forward pass in evaluation. Each is timed by the wall clock after one untimed warm-up batch, with
the optimizer's step included, at the mixed precision the run trains in. Times are per *example* (a question
with all its windows, a text with all its chunks), the unit ``--max-samples`` counts.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..architectures import get_adapter
from ..checkpoint import load_config
from ..seeding import seed_everything
from ..settings import DataSettings, DistillWeights, TaskSettings
from ..training.layer_map import build_layer_map, kept_layers
from ..training.loop import adamw
from ..training.objectives import DistillObjective, FinetuneObjective
from ..training.teacher_store import TeacherStore, keyed_collator, with_keys
from .training_common import task_inputs

@dataclass(frozen=True)
class Throughput:
    """Seconds per example of each kind of work, measured on this machine at the start of a run."""

    teacher: float  # the teacher's forward pass on a training text (distillation's first pass over it)
    distill: float  # a distillation step of the student, the teacher's outputs read back from the store
    finetune: float  # a fine-tuning step of the student with the teacher's logits read back
    evaluate: float  # the student on a validation example


#: examples each kind of work is timed on (after one warm-up batch of them)
PROBE_EXAMPLES = 96
PROBE_BATCH = 32


def training_throughput(student: str | os.PathLike, teacher: str | os.PathLike, data: DataSettings,
                        task_settings: TaskSettings = TaskSettings(), *, weights: DistillWeights = DistillWeights(),
                        precision: str = "no", dropout: float | None = None, examples: int = PROBE_EXAMPLES,
                        seed: int = 0) -> Throughput:
    """Seconds per example of the teacher's pass, a distillation step (its losses weighted by ``weights``: what it
    compares decides what the teacher store reads back), a fine-tuning step and an evaluation of ``student`` with
    ``teacher`` on ``data``'s training examples (a seeded subset of ``examples``); ``dropout``: the student's in
    training (None: the model's own), which costs time of its own."""
    seed_everything(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # heads made for the probe, the loaders' own chatter
        task = task_inputs(student, replace(data, max_samples=examples + PROBE_BATCH), task_settings, seed=seed,
                           evaluate=False, require_labels=False)
        kind = task.kind
        teacher_model = kind.load(teacher, role="teacher", need_trained_head=False)
        student_model = kind.load(student, role="student", need_trained_head=False, dropout=dropout,
                                  attention_dropout=dropout)
    depth = _depth(student_model), _depth(teacher_model)
    mapping = build_layer_map(*depth, kept=kept_layers(student_model, depth[1]))
    has_head = kind.head_labels(load_config(teacher)) is not None
    distill = DistillObjective(student_model, teacher_model, weights=weights, layer_map=mapping, kind=kind,
                               keep_outputs=has_head)
    rows = with_keys(task.train_rows)
    collate = keyed_collator(task.collate)
    # the first batch warms up; the rest are timed (a small dataset: the warm-up batch again)
    batches = [collate([rows[i] for i in range(start, min(start + PROBE_BATCH, len(rows)))])
               for start in range(0, len(rows), PROBE_BATCH)]
    warm, timed = batches[:1], batches[1:] or batches[:1]
    timed_rows = sum(int(b["input_ids"].shape[0]) for b in timed)
    # the examples the timed rows are worth: a windowed task has more rows than examples
    share = timed_rows * task.identity["train"]["samples"] / len(rows)
    with tempfile.TemporaryDirectory(prefix="ghostify-throughput-") as tmp, _autocast(precision):
        distill.store = TeacherStore(tmp, teacher, cap_bytes=1 << 40).open(tmp)
        try:
            optimizer = adamw([p for p in distill.parameters() if p.requires_grad], lr=1e-12)  # as training's
            step = _trainer(distill, optimizer)
            first = _timed(step, warm, timed)  # the teacher runs and its outputs are stored
            again = _timed(step, warm, timed)  # read back
            finetune_seconds = None
            if kind.can_finetune() is None and "labels" in rows.column_names:
                finetune = FinetuneObjective(student_model, kind, teacher=teacher_model)
                finetune.store = distill.store
                finetune_seconds = _timed(_trainer(finetune, optimizer), warm, timed)
            evaluate = _timed(_evaluator(student_model, kind), warm, timed)
        finally:
            distill.store.close()
    teacher_seconds = max(0.0, first - again)
    return Throughput(teacher=teacher_seconds / share, distill=again / share,
                      finetune=(finetune_seconds if finetune_seconds is not None else again) / share,
                      evaluate=evaluate / share)


def _depth(model) -> int:
    return sum(get_adapter(model.config).layer_applications(model))


def _trainer(objective: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[dict], None]:
    def step(batch: dict) -> None:
        objective.train()
        loss, _ = objective(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def _evaluator(model: torch.nn.Module, kind: Any) -> Callable[[dict], None]:
    @torch.no_grad()
    def step(batch: dict) -> None:
        model.eval()
        inputs = kind.inputs({k: v for k, v in batch.items() if k not in ("example_key", "labels")})
        model(**inputs)

    return step


def _timed(step: Callable[[dict], None], warm: list[dict], timed: list[dict]) -> float:
    for batch in warm:
        step(batch)
    start = time.perf_counter()
    for batch in timed:
        step(batch)
    return time.perf_counter() - start


@contextlib.contextmanager
def _autocast(precision: str) -> Iterator[None]:
    if precision == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    else:
        yield


__all__ = ["PROBE_EXAMPLES", "Throughput", "training_throughput"]
