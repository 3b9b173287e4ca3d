"""How fast this machine trains a given student: what ``compress --budget 20m`` sizes its stages by.

A seeded subset of the task's own training examples goes through the training loop itself
(:func:`ghostify.training.loop.train`: its data loader and collation, the teacher store's reads and writes, the
optimizer's step with clipping and the schedule), at the mixed precision the run trains in: two epochs of
distillation (the first also runs the teacher and stores its outputs, the second reads them back) and one of the
fine-tune with the teacher's logits read back. Each is timed by the loop's own clock of its epochs. The student's
forward pass in evaluation is timed on a few batches. Times are per *example* (a question with all its windows, a
text with all its chunks), the unit ``--max-samples`` counts.

Why the loop and not a few batches timed alone: on a 2-core Intel Xeon three pre-collated batches, timed at full
use of both cores, predicted the CoNLL-2003 3x student's distillation at 697 s and it took 1,030 (1.48x; the loop's
work between steps, batches loaded and collated and the stored outputs read back, keeps a core idle about a third
of the time), the fine-tune after it got its fewest steps and the run ended 11.5% past its 20 minutes. Timed
through the loop, the same run was planned at 711 s and took 851 (1.20x: the probe's ten steps an epoch read
0.0063-0.0094 s a text in five probes within minutes on this VM; the fine-tune, planned again after the
distillation, absorbs such a miss) and ended 3.7% past them.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..architectures import get_adapter
from ..checkpoint import load_config
from ..device import default_device, synchronize
from ..seeding import seed_everything
from ..settings import DataSettings, DistillWeights, TaskSettings, TrainSettings
from ..training.layer_map import build_layer_map, kept_layers
from ..training.loop import train
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
    #: training rows per example: a question's windows, a long text's chunks, a sentence pair's two texts (the
    #: embeddings task); the loop's steps are of rows, the plan's counts of examples
    rows: float = 1.0
    #: the teacher store's own work (in ``teacher`` and ``distill`` above): moving a text's outputs off the device,
    #: writing them (its first visit), and reading them back (a later one)
    storing: float = 0.0
    reading: float = 0.0

    def per_step(self, batch_size: int = 32) -> float:
        """The examples one optimizer step of ``batch_size`` rows covers."""
        return batch_size / self.rows

    def teacher_pass(self) -> float:
        """The teacher's pass on an example alone (``teacher`` is what a first visit costs over a later one: the
        pass and storing its outputs, less reading them back)."""
        return max(0.0, self.teacher - self.storing + self.reading)

    def store_pays(self) -> bool:
        """Whether storing an example's outputs and reading them back once costs less than the teacher's pass: true
        on a CPU (a 2-core AMD EPYC: 0.06-0.10 s of reading and 0.13-0.25 s of storing a 320-text SST-2 probe,
        against 1.1-1.2 s of the teacher), not where the teacher runs fast and the store's copies and files do not
        (on an NVIDIA H200 the one-shot schedule distilled 1.7k texts/s computing the teacher at every step, a time
        budget 0.36k storing it)."""
        return self.storing + self.reading < self.teacher_pass()

    def without_store(self) -> Throughput:
        """The rates where the teacher runs at every visit (no store): no first visit costs more than another,
        and every distillation and fine-tuning step pays the teacher's pass where it read the store."""
        teacher = self.teacher_pass()
        return replace(self, teacher=0.0, distill=self.distill - self.reading + teacher,
                       finetune=self.finetune + teacher, storing=0.0, reading=0.0)

    def slowed(self, factor: float) -> Throughput:
        """Every kind of work ``factor`` times slower (the same rows per example)."""
        return replace(self, teacher=self.teacher * factor, distill=self.distill * factor,
                       finetune=self.finetune * factor, evaluate=self.evaluate * factor,
                       storing=self.storing * factor, reading=self.reading * factor)


#: examples the training loop is timed on: 10 steps of 32 an epoch
PROBE_EXAMPLES = 320
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
        task = task_inputs(student, replace(data, max_samples=examples), task_settings, seed=seed,
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
    samples = task.identity["train"]["samples"]  # the examples the rows are worth: a windowed task has more rows
    settings = TrainSettings(epochs=2, batch_size=PROBE_BATCH, learning_rate=1e-12, mixed_precision=precision,
                             seed=seed, checkpoint_steps=1 << 30)
    with tempfile.TemporaryDirectory(prefix="ghostify-throughput-") as tmp:
        if default_device().type != "cpu":
            # an accelerator loads each kernel at its first use (CUDA loads them lazily) and picks its matrix
            # products' algorithms per shape: a long run pays that once, ten steps an epoch pay much of it (an
            # NVIDIA H200's probe planned SST-2's 6x distillation at a third of the pace it then ran). An untimed
            # epoch over the same rows pays it first.
            distill.store = TeacherStore(Path(tmp) / "warm-up-store", teacher, cap_bytes=1 << 40, precision=precision)
            _epochs(distill, rows, collate, replace(settings, epochs=1), Path(tmp) / "warm-up")
        store = Path(tmp) / "store"
        distill.store = TeacherStore(store, teacher, cap_bytes=1 << 40, precision=precision)
        first, again = _epochs(distill, rows, collate, settings, Path(tmp) / "distill")
        storing, reading = distill.store.seconds["storing"], distill.store.seconds["reading"]
        finetune_seconds = None
        if kind.can_finetune() is None and "labels" in rows.column_names:
            finetune = FinetuneObjective(student_model, kind, teacher=teacher_model)
            # the distillation's logits
            finetune.store = TeacherStore(store, teacher, cap_bytes=1 << 40, precision=precision)
            finetune_seconds, = _epochs(finetune, rows, collate, replace(settings, epochs=1), Path(tmp) / "finetune")
    batches = [collate([rows[i] for i in range(start, min(start + PROBE_BATCH, len(rows)))])
               for start in range(0, len(rows), PROBE_BATCH)]
    # the training loop left the student where Accelerate put it (a GPU, where there is one): its batches go there
    device = next(student_model.parameters()).device
    batches = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()} for batch in batches]
    with _autocast(precision, device):
        evaluate = _timed(_evaluator(student_model, kind), batches[:1], batches[1:] or batches[:1], device)
    evaluated = sum(int(b["input_ids"].shape[0]) for b in batches[1:] or batches[:1]) * samples / len(rows)
    return Throughput(teacher=max(0.0, first - again) / samples, distill=again / samples,
                      finetune=(finetune_seconds if finetune_seconds is not None else again) / samples,
                      evaluate=evaluate / evaluated, rows=len(rows) / samples, storing=storing / samples,
                      reading=reading / samples)


#: a reduced precision runs a kind of work only where the probe times it at most this share of float32's: on a
#: 2-core AMD EPYC with AVX-512 BF16 the students' steps ran within -8% to +5% of float32's in bf16 over 6,400
#: examples while the probe's ten steps read differences of up to 11% either way; bf16 took 1.4-2.6x float32's
#: peak memory and rounds more (``benchmarks/results/training_precision.md``). The teacher's pass gained 27-43%.
REDUCED_PRECISION_SHARE = 0.9


def fastest_precisions(by_precision: dict[str, Throughput], teacher: str | None = None
                       ) -> tuple[Throughput, dict[str, Any]]:
    """The rates of a run whose teacher passes and student steps each run in the precision the probe timed
    faster (``by_precision``: a probe's rates in each, float32's under "no"; a reduced precision only where it took
    at most :data:`REDUCED_PRECISION_SHARE` of float32's time; ``teacher``: the teacher's precision where an
    earlier stage chose it, which its stored outputs are keyed by), and the choice with the times it rests on
    (ms an example).

    Why each on its own: on a 2-core AMD EPYC with AVX-512 BF16, MiniLM's pass as SST-2's teacher took 5.3 ms a
    text in bf16 against 7.2 in float32 (the probe of a 20-minute 6x run's first stage), while its students'
    steps took as long in either (small products gain less from bf16 than its conversions cost)."""
    measured = {p: {"teacher": 1000 * r.teacher_pass(), "student": 1000 * (r.distill + r.finetune)}
                for p, r in by_precision.items()}

    def faster(work: str) -> str:
        fastest = min(measured, key=lambda p: measured[p][work])
        if "no" in measured and fastest != "no" and \
                measured[fastest][work] > REDUCED_PRECISION_SHARE * measured["no"][work]:
            return "no"
        return fastest

    teacher = teacher or faster("teacher")
    student = faster("student")
    timed = by_precision[teacher]
    rates = replace(by_precision[student], teacher=timed.teacher, storing=timed.storing, reading=timed.reading)
    return rates, {"teacher": teacher, "student": student, "ms": measured}


def _epochs(objective: torch.nn.Module, rows: Any, collate: Callable, settings: TrainSettings,
            output: Path) -> list[float]:
    """The wall seconds of each epoch of training ``objective`` on ``rows`` (the loop's own clock: without its
    evaluation and saving at the epoch's end); nothing of the student is written."""
    train(objective, rows, collate, settings, output, None, quiet=True)
    return [epoch["wall"] for epoch in json.loads((output / "training.json").read_text())["epoch_seconds"]]


def _depth(model) -> int:
    return sum(get_adapter(model.config).layer_applications(model))


def _evaluator(model: torch.nn.Module, kind: Any) -> Callable[[dict], None]:
    @torch.no_grad()
    def step(batch: dict) -> None:
        model.eval()
        inputs = kind.inputs({k: v for k, v in batch.items() if k not in ("example_key", "labels")})
        model(**inputs)

    return step


def _timed(step: Callable[[dict], None], warm: list[dict], timed: list[dict], device: torch.device) -> float:
    for batch in warm:
        step(batch)
    synchronize(device)
    start = time.perf_counter()
    for batch in timed:
        step(batch)
    synchronize(device)  # a GPU runs the steps after they were queued: the clock waits for them
    return time.perf_counter() - start


@contextlib.contextmanager
def _autocast(precision: str, device: torch.device) -> Iterator[None]:
    if precision == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
    else:
        yield


__all__ = ["PROBE_EXAMPLES", "REDUCED_PRECISION_SHARE", "Throughput", "fastest_precisions", "training_throughput"]
