"""A compression budget stated in time (``compress --budget 20m``): what the text means, and how many examples
and epochs each training stage gets for it, from the throughput measured on this machine when the run starts.

The plan is a pure function of its inputs (:func:`plan_training`), so it is tested by hand-computed values; the
run measures the throughputs (``compress``) and records the plan it chose (``budget.json``), which a later run
can be given instead of a time (``--budget OUT/budget.json``) to train with the same counts, byte for byte.

How the time is split: the training stages get what is left of the budget after everything else the run does
(measured so far, plus the evaluations, export and timing still to come); the labelled fine-tune with the
teacher gets :data:`FINETUNE_SHARE` of it, the distillation stages the rest, in equal parts. Distillation reads
the whole training text (and ``--unlabelled``) before it reads any text twice: its first pass over a text also
runs the teacher (whose outputs the teacher store keeps), each later pass only the student.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import GhostifyError
from ..settings import MIXED_PRECISION
from ..steps.throughput import Throughput

#: the part of the training time the labelled fine-tune with the teacher gets; distillation gets the rest
FINETUNE_SHARE = 0.25
#: more passes than this over the same text do not pay for their time (and a plan for a large budget on a small
#: task would otherwise run for hundreds of epochs)
MAX_EPOCHS = 20
#: the fewest optimizer steps of 32 examples a training stage is worth running
MIN_STEPS = 8
#: what a first compression stage takes besides the teacher's evaluation and scores (comparing the candidate
#: allocations, timing them, pruning and tuning, the throughput probe): this many seconds plus
#: :data:`FIRST_STAGE_PER_SCORING` times as long as the evaluation and scores took. Fit to five runs on a 2-core AMD
#: EPYC (seconds of evaluation and scores, then the rest of the first stage): SST-2 at 3x 30, 141 and 29, 154; at
#: 6x 45, 187; CoNLL-2003 at 3x 64, 153; the SQuAD part at 3x (256-token windows) 198, 444
FIRST_STAGE_SECONDS = 100.0
FIRST_STAGE_PER_SCORING = 1.75
#: a later compression stage's scoring, allocation, tuning and timing against the first stage's (which also
#: evaluated the teacher and compared candidate allocations): 0.40-0.74 on SST-2 and CoNLL-2003 (above), 0.34 on
#: STS-B at 3x (180 s against 531 s)
LATER_STAGE_SHARE = 0.5

_UNIT = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(hr|h|min|m|sec|s)")


def parse_duration(text: str) -> float | None:
    """Seconds of a duration such as ``20m``, ``1h``, ``1h30m``, ``90s`` or ``1.5h``; None when ``text`` is not
    one (a budget's name, a file)."""
    compact = str(text).strip().lower().replace(" ", "")
    parts = _DURATION.findall(compact)
    if not parts or _DURATION.sub("", compact):
        return None
    seconds = sum(float(n) * _UNIT[unit] for n, unit in parts)
    if seconds <= 0:
        raise GhostifyError(f"--budget {text} is no time at all; give a duration such as 20m or 1h")
    return seconds


@dataclass(frozen=True)
class StageCounts:
    """One training stage's data: a seeded subset of ``max_samples`` examples (None: all of them), ``epochs``, the
    last of them cut short at ``max_steps`` optimizer steps in all (None: every epoch whole); training ended at
    ``stop_step`` by the run's deadline (None: it took every step), the schedule sized by the rest. ``per_step``
    below: the examples one optimizer step covers, :meth:`Throughput.per_step` (a step of 32 rows covers 16
    sentence pairs: their two texts are rows of their own)."""

    max_samples: int | None
    epochs: int
    max_steps: int | None = None
    stop_step: int | None = None
    #: the precisions the stage trains in and runs its teacher in, where a time budget timed them
    #: (:func:`~ghostify.steps.throughput.fastest_precisions`; None: the run's ``--mixed-precision``)
    mixed_precision: str | None = None
    teacher_precision: str | None = None

    def _read(self, available: int) -> int:
        """The examples one epoch reads, of the ``available`` ones."""
        return available if self.max_samples is None else min(self.max_samples, available)

    def examples(self, available: int, per_step: float = 32) -> int:
        """The examples the stage trains on, counting every pass (a cut epoch's last step as a whole batch)."""
        read = self._read(available)
        steps = min(s for s in (self.max_steps, self.stop_step, math.inf) if s is not None)
        if steps == math.inf:
            return read * self.epochs
        per_epoch = math.ceil(read / per_step)
        return min(read * self.epochs, (steps // per_epoch) * read + round((steps % per_epoch) * per_step))

    def describe(self, available: int, per_step: float = 32) -> str:
        """``14,041 x 2 epochs``, ``5,000 x 1 epoch``, ``14,041 x 2 epochs and 147 of 439 steps of one more``."""
        read = self._read(available)
        per_epoch = math.ceil(read / per_step)
        stopped = "" if self.stop_step is None else f", stopped at step {self.stop_step:,} by the deadline"
        if self.max_steps is None or self.max_steps >= per_epoch * self.epochs:
            return f"{read:,} x {self.epochs} epoch{'s' if self.epochs > 1 else ''}{stopped}"
        whole, part = divmod(self.max_steps, per_epoch)
        return (f"{read:,} x {whole} epoch{'s' if whole != 1 else ''} and {part} of {per_epoch} steps of one more"
                f"{stopped}")

    def to_json(self) -> dict[str, Any]:
        """The stage's settings (those after ``epochs`` only where set: a budget.json from before reads the same)."""
        return {k: v for k, v in asdict(self).items() if k in ("max_samples", "epochs") or v is not None}

    def in_precisions(self, choice: dict[str, Any] | None) -> StageCounts:
        """These counts trained in the precisions of ``choice`` (:func:`fastest_precisions`'; None: as they are)."""
        if choice is None:
            return self
        return replace(self, mixed_precision=choice["student"], teacher_precision=choice["teacher"])


@dataclass(frozen=True)
class TrainingPlan:
    """The counts of every training stage (``finetune`` None: the run has no fine-tune, as the embeddings task), and
    the seconds the plan expects each to take."""

    distill: tuple[StageCounts, ...]
    finetune: StageCounts | None
    seconds: dict[str, float]
    #: whether the teacher's outputs were stored (False: the run measured that storing did not pay, and computed
    #: them at every step; its values then never passed through float16, so a re-run must not store them either)
    teacher_store: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"distill": [c.to_json() for c in self.distill],
                "finetune": None if self.finetune is None else self.finetune.to_json(), "seconds": self.seconds,
                "teacher_store": self.teacher_store}

    @classmethod
    def from_json(cls, data: Any, where: str) -> TrainingPlan:
        """A plan written by :meth:`to_json` (``where``: the file, for the message)."""
        try:
            distill = tuple(_counts(c) for c in data["distill"])
            finetune = None if data["finetune"] is None else _counts(data["finetune"])
            seconds = {str(k): float(v) for k, v in data.get("seconds", {}).items()}
            teacher_store = data.get("teacher_store", True)
            if not isinstance(teacher_store, bool):
                raise ValueError(f"teacher_store {teacher_store!r}")
        except (TypeError, KeyError, ValueError) as exc:
            raise GhostifyError(f"--budget {where} is not a budget a compress run wrote ({type(exc).__name__}: {exc}); "
                                "give a time (e.g. 20m), a budget's name, or the budget.json of an earlier run") from None
        if not distill:
            raise GhostifyError(f"--budget {where} has no distillation stage; give the budget.json of an earlier run")
        return cls(distill=distill, finetune=finetune, seconds=seconds, teacher_store=teacher_store)


def _counts(data: Any) -> StageCounts:
    samples, epochs = data["max_samples"], data["epochs"]
    if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
        raise ValueError(f"max_samples {samples!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs {epochs!r}")
    steps = {key: data.get(key) for key in ("max_steps", "stop_step")}
    for key, value in steps.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{key} {value!r}")
    precisions = {key: data.get(key) for key in ("mixed_precision", "teacher_precision")}
    for key, value in precisions.items():
        if value is not None and value not in MIXED_PRECISION:
            raise ValueError(f"{key} {value!r}")
    return StageCounts(samples, epochs, **steps, **precisions)


def plan_training(seconds: float, *, texts: int, labelled: int, throughput: Throughput, stages: int,
                  batch_size: int = 32) -> TrainingPlan:
    """How many examples and epochs each of ``stages`` distillation stages (on ``texts`` training texts) and the
    labelled fine-tune (on ``labelled`` examples) get to fill ``seconds`` of training at ``throughput``.

    Distillation reads its texts in a seeded order, each once before any twice: a stage that cannot read them all
    reads a subset, once; one that can reads them all for as many epochs as fit (at most :data:`MAX_EPOCHS`).
    Later stages read texts an earlier one already gave the teacher: only their student steps cost time. The
    fine-tune, likewise, on its labelled examples. (A run plans each stage as it comes, from the time then left,
    with :func:`distill_counts` and :func:`finetune_counts`; this is the same plan made at once.)"""
    if seconds <= 0:
        raise GhostifyError(f"the budget leaves {seconds:.0f} s for training once the rest of the run is counted; "
                            "give a larger --budget")
    finetune_seconds = FINETUNE_SHARE * seconds
    per_stage = (seconds - finetune_seconds) / stages
    per_step = throughput.per_step(batch_size)
    counts: list[StageCounts] = []
    spent: dict[str, float] = {}
    seen = 0  # texts the teacher has already read (their outputs are in the store)
    for k in range(stages):
        plan, cost, seen = distill_counts(per_stage, texts, seen, throughput, batch_size)
        check_counts(f"distill {k + 1}", plan, texts, per_stage, per_step)
        counts.append(plan)
        spent[f"distill {k + 1}"] = cost
    finetune, cost = finetune_counts(finetune_seconds, labelled, throughput, labelled_seen(seen, texts, labelled),
                                     batch_size)
    check_counts("the fine-tune", finetune, labelled, finetune_seconds, per_step)
    spent["finetune"] = cost
    return TrainingPlan(distill=tuple(counts), finetune=finetune, seconds=spent)


def stages_worth_it(seconds: float, stages: int, *, scoring: float, evaluation: float) -> int:
    """How many of ``stages`` compression stages a budget of ``seconds`` is worth, predicted before the first
    allocation from how long the teacher's evaluation (``evaluation`` seconds) and its scores (``scoring``, the
    evaluation included) took: the most stages whose distillations each get at least as long as a later stage's
    own scoring and allocation take (a stage that distils for less than it costs to set up leaves the model worse
    than that time spent training in fewer). The end of the run (two evaluations of the compressed model, about
    one of the teacher; the export and the last timing) is reserved as the run's clock reserves it (``compress``)."""
    first = FIRST_STAGE_SECONDS + (1 + FIRST_STAGE_PER_SCORING) * scoring
    later = LATER_STAGE_SHARE * first
    ending = ending_seconds(evaluation, later)
    for count in range(stages, 1, -1):
        training = seconds - first - later * (count - 1) - ending
        if (1 - FINETUNE_SHARE) * training / count >= later:
            return count
    return 1


def ending_seconds(evaluations: float, later_stage: float) -> float:
    """What a run reserves for its end, after the last training stage: the two evaluations of the compressed model
    (``evaluations`` seconds together; the teacher's one evaluation stands for them before any is measured) and
    the export and last timing, about half a later stage's scoring and allocation (``later_stage`` seconds)."""
    return evaluations + later_stage / 2


def _least(available: int, per_step: float) -> int:
    """The fewest examples a training stage is worth running: :data:`MIN_STEPS` steps (or every example)."""
    return min(math.ceil(MIN_STEPS * per_step), available)


def fewest(counts: StageCounts, available: int, per_step: float = 32) -> StageCounts:
    """``counts``, or :data:`MIN_STEPS` steps of ``per_step`` examples (of the ``available`` ones) where they are
    fewer: what a stage trains once the budget is spent but the run must still finish (a later stage)."""
    least = _least(available, per_step)
    return counts if counts.examples(available, per_step) >= least else \
        replace(counts, max_samples=least if least < available else None, epochs=1, max_steps=None, stop_step=None)


def check_counts(stage: str, counts: StageCounts, available: int, seconds: float, per_step: float = 32) -> None:
    """Refuse a plan that gives ``stage`` fewer than :data:`MIN_STEPS` optimizer steps (of the examples there are)."""
    if counts.examples(available, per_step) < _least(available, per_step):
        raise GhostifyError(f"the budget leaves {max(0.0, seconds):.0f} s for {stage}: too little to take {MIN_STEPS} "
                            f"optimizer steps ({_least(available, per_step):,} examples) at the throughput measured "
                            "here; give a larger --budget, fewer --stages, or --budget quick")


def distill_counts(seconds: float, texts: int, seen: int, throughput: Throughput, batch_size: int = 32
                   ) -> tuple[StageCounts, float, int]:
    """One distillation stage's counts for ``seconds`` on ``texts`` texts, ``seen`` of which the teacher has read
    (a text it has not costs its pass the first time); the seconds they take, and the texts seen after it."""
    plan, cost = _fill(seconds, texts, throughput.distill, throughput.teacher, seen=seen,
                       per_step=throughput.per_step(batch_size))
    return plan, cost, max(seen, min(texts, plan.max_samples or texts))


def labelled_seen(seen: int, texts: int, labelled: int) -> int:
    """How many of the ``labelled`` examples the distillations gave the teacher, having read ``seen`` of ``texts``
    texts (the training split's, then ``--unlabelled``'s): all once every text was read; else, where unlabelled
    texts are mixed in (a seeded subset of both), their share of what was read; without them, ``seen``."""
    if seen >= texts:
        return labelled
    return seen if texts == labelled else round(seen * labelled / texts)


def finetune_counts(seconds: float, labelled: int, throughput: Throughput, seen: int | None = None,
                    batch_size: int = 32) -> tuple[StageCounts, float]:
    """The fine-tune's counts for ``seconds`` on ``labelled`` examples: the teacher's logits read back for the
    ``seen`` ones distillation gave it (the same seeded order of the training split; None: all), its pass paid
    for the rest (on SST-2 at 6x a fine-tune of 27,651 examples after distillations of 22,138 texts took 276 s
    where 197 s were planned without it)."""
    return _fill(seconds, labelled, throughput.finetune, throughput.teacher, seen=seen,
                 per_step=throughput.per_step(batch_size))


def finetune_with_evaluations(seconds: float, labelled: int, throughput: Throughput, seen: int | None, *,
                              evaluation: float, evaluate_first: bool = False, batch_size: int = 32
                              ) -> tuple[StageCounts, float]:
    """:func:`finetune_counts` for a fine-tune stage of ``seconds`` that also evaluates after each of its epochs
    (``evaluation`` seconds each; ``evaluate_first``: and before its first step): the most epochs whose steps and
    evaluations fit. The seconds returned are its steps' alone, as :func:`finetune_counts`' (the SQuAD part's
    fine-tunes at 3x with ``--budget 20m``, planned without their three evaluations of 9 s and the stage's start,
    stopped at the deadline at 81% and 87% of their schedules, their learning rates not decayed)."""
    epochs = 1
    while True:
        evaluations = epochs + int(evaluate_first)
        counts, cost = finetune_counts(seconds - evaluations * evaluation, labelled, throughput, seen, batch_size)
        if counts.epochs <= epochs:
            return counts, cost
        epochs = counts.epochs


def stage_overhead(wall: float, loop: float, evaluations: int, evaluation: float) -> float:
    """What a training stage took besides its steps and its ``evaluations`` (``evaluation`` seconds each): loading
    the models and data, saving (``wall``: the stage's time, ``loop``: its epochs' by the loop's own clock)."""
    return max(0.0, wall - loop - evaluations * evaluation)


def distillation_pace(loop: float, planned: float) -> float:
    """How many times its plan the last distillation took by the loop's own clock (``loop`` against ``planned``
    seconds): the fine-tune after it is planned at the probe's rates times this, faster as well as slower, since the
    probe's ten steps an epoch miss a long run's pace either way. On a 2-core Xeon CoNLL-2003's 3x student distilled
    1.2x slower than probed; on an NVIDIA H200 SST-2's 6x student in 0.39 of its plan, and a fine-tune held to the
    probe's rates left a 4-minute run 22% short of its time. 1 where nothing was planned or timed."""
    return loop / planned if planned > 0 and loop > 0 else 1.0


def _fill(seconds: float, available: int, step: float, first: float, *, seen: int | None = None,
          per_step: float = 32) -> tuple[StageCounts, float]:
    """The most examples (a subset, one epoch) or epochs (all of them, the last cut short where a whole one does not
    fit) of ``available`` that fit ``seconds`` at ``step`` seconds each, plus ``first`` seconds the first time an
    example beyond the ``seen`` ones is read; an optimizer step covers ``per_step`` examples."""
    seen = available if seen is None else min(seen, available)

    def cost(n: int, epochs: int) -> float:
        return n * step * epochs + max(0, n - seen) * first

    if cost(available, 1) > seconds:
        # a subset, once (its seeded order is the earlier stages' too: the first ``seen`` of it are the ones read)
        n = max(1, _largest(lambda m: cost(m, 1) <= seconds, available))
        return StageCounts(n, 1), cost(n, 1)
    epochs = 1
    while epochs < MAX_EPOCHS and cost(available, epochs + 1) <= seconds:
        epochs += 1
    spent = cost(available, epochs)
    # whole epochs alone left up to one epoch's time unspent (CoNLL-2003 at 3x with --budget 20m finished at 86% of
    # it): the rest goes to the steps of one more epoch that fit, every text already read once
    per_epoch = math.ceil(available / per_step)
    extra = 0 if epochs == MAX_EPOCHS else min(per_epoch - 1, int((seconds - spent) // (step * per_step)))
    if extra < 1:
        return StageCounts(None, epochs), spent
    return StageCounts(None, epochs + 1, epochs * per_epoch + extra), spent + extra * per_step * step


def _largest(fits, upper: int) -> int:
    """The largest n in [0, upper] with fits(n) (fits is monotone)."""
    low, high = 0, upper
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


__all__ = ["FINETUNE_SHARE", "LATER_STAGE_SHARE", "MAX_EPOCHS", "MIN_STEPS", "StageCounts", "Throughput",
           "TrainingPlan",
           "check_counts", "distill_counts", "distillation_pace", "ending_seconds", "fewest", "finetune_counts",
           "finetune_with_evaluations",
           "labelled_seen", "parse_duration", "plan_training", "stage_overhead", "stages_worth_it"]
