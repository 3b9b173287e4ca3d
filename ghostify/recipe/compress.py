"""``ghostify compress``: from a model to one that is N times faster on this machine, in the runtime it
will ship in, losing as little accuracy as a latency budget allows.

The work is a recipe (the stages of ``recipes/compress.yaml``, run by the recipe runner into
``OUT/stages/``): [fine-tune a teacher] -> importance -> latency model -> [drop-layers -> importance]
-> ``prune --speedup`` -> [attach-ghost] -> distill -> finetune with the teacher -> eval -> export -> eval.
With ``--drop-layers``, the allocation also weighs whole layers once the scores and the latency model
exist: the layers it removes go in a drop-layers stage, the smaller model is scored again, and prune
allocates the rest on it. Between pruning and training, compress measures: the dense and the
pruned model take turns in the target runtime (medians); a speed-up that misses the target by more
than the tolerance is corrected once (the allocation asks for target x target / measured) and said
so. Latency depends on the shape, not on the weights, so this check costs no training. The shipped
model is measured again at the end and ``OUT/report.md``, ``report.json`` and ``speedup.png`` say
what came out.

This module is the orchestration; its parts: the settings and the recipe (``compress_settings``), the allocation
record ``allocation.json`` (``compress_record``), the clock (``compress_timing``) and the report
(``compress_report``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..checkpoint import load_config
from ..data import load_split, load_unlabelled
from ..device import training_device_name
from ..errors import GhostifyError
from ..files import check_disjoint, output_lock, write_text_atomically
from ..flatten import flat_settings
from ..latency_model import RUNTIMES, Deployment
from ..runtimes import target
from ..settings import (BUDGETS, Budget, CompressDefaults, DataSettings, DistillWeights, TaskSettings,
                        TeacherStoreSettings)
from ..steps import latency as measure_latency
from ..steps.fidelity import SEARCH, UNIFORM, candidate_settings, choose_allocation
from ..steps.latency_plan import check_reach, plan_structure, predicted_speedup
from ..steps.throughput import fastest_precisions, training_throughput
from ..steps.training_common import task_kind
from ..tasks import dataset_for
from ..training.loop import Deadline
from . import compress_record
from .compress_record import ALLOCATION
from .compress_report import (PLOT, REPORT_JSON, REPORT_MD, described, described_count, markdown, precision_name,
                              training_summary)
from .compress_report import report as _report
from .compress_report import write_report as _write_report
from .compress_settings import (RESCORED, TEACHER_STORE, CompressSettings, Step, Structure, closest, compress_recipe,
                                data_mapping, dense_model, prefix, shipped_model, stage_name)
from .compress_timing import DenseExports, chosen_runtime
from .compress_timing import measure as _measure
from .plan import plan
from .run import check_outputs
from .run import run as run_recipe
from .schema import Recipe
from .time_budget import (
    FINETUNE_SHARE,
    LATER_STAGE_SHARE,
    MIN_STEPS,
    StageCounts,
    Throughput,
    check_counts,
    distill_counts,
    distillation_pace,
    ending_seconds,
    fewest,
    finetune_counts,
    finetune_with_evaluations,
    labelled_seen,
    stage_overhead,
    stages_worth_it,
)

#: the recipe's run directory inside OUT
STAGES = "stages"
#: the counts a run with a time budget chose, which ``--budget OUT/budget.json`` trains with again
BUDGET_FILE = "budget.json"


@flat_settings
def compress(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    speedup: float,
    deployment: Deployment = Deployment(runtime=CompressDefaults.runtime),
    data: DataSettings = DataSettings(),
    task_settings: TaskSettings = TaskSettings(),
    teacher: str | os.PathLike | None = None,
    ghosts: bool = CompressDefaults.ghosts,
    drop_layers: bool | None = CompressDefaults.drop_layers,
    prune_hidden: bool | None = None,
    budget: str = CompressDefaults.budget,
    epochs: int | None = None,
    importance_samples: int | None = None,
    stages: int | None = None,
    unlabelled: str | os.PathLike | None = None,
    masked_copies: int | None = None,
    mixed_precision: str = CompressDefaults.mixed_precision,
    teacher_store_gb: float = TeacherStoreSettings.teacher_store_gb,
    tolerance: float = CompressDefaults.tolerance,
    rounds: int = CompressDefaults.rounds,
    seed: int = CompressDefaults.seed,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Compress ``model`` (with ``teacher``, or itself when it is fine-tuned for the task, as the teacher)
    to a predicted ``speedup`` in ``deployment``, check it measured, train it (unless the budget is ``none``),
    and write the report. ``drop_layers``: the allocation may also remove whole layers, ``prune_hidden``: residual
    channels (:func:`_structure`; None: where the model's interface keeps its shape and the budget trains).
    ``budget``: a name (``quick``, ``standard``, ``full``, ``none``), a time for the whole run (``20m``: the stages
    sized by the throughput measured here) or an earlier run's ``budget.json``; ``stages``: how many times it prunes
    and distils on the way (None: by the target); ``unlabelled``: more text to distil on; ``masked_copies``: copies of
    the training text with some words masked that the distillations read too (None: the budget's; a time budget's
    for question answering: 1).
    Re-running with the same ``output`` skips the stages already done.

    Example:
        >>> compress("./minilm", "out/c2", speedup=2, data=DataSettings(task="sst2", dataset="../shared/data/glue"))  # doctest: +SKIP
    """
    settings = CompressSettings(model=str(model), speedup=speedup, deployment=deployment, data=data,
                                task_settings=task_settings, teacher=None if teacher is None else str(teacher),
                                ghosts=ghosts, drop_layers=drop_layers, prune_hidden=prune_hidden, budget=budget,
                                epochs=epochs, importance_samples=importance_samples, stages=stages,
                                unlabelled=None if unlabelled is None else str(unlabelled),
                                masked_copies=masked_copies, mixed_precision=mixed_precision,
                                teacher_store_gb=teacher_store_gb, tolerance=tolerance,
                                rounds=rounds, seed=seed)
    out = Path(output).expanduser()
    if out.exists() and not out.is_dir():
        raise GhostifyError(f"output {out} exists and is a file; choose another -o")
    say = _Said(say)  # each stage's line once, however often the runner is re-entered for a prefix of the recipe
    settings, fine_tunes_teacher = _resolved(settings, out, say)
    asked = settings.deployment.runtime
    settings = chosen_runtime(settings, say)  # --runtime auto: the fastest installed deployment of the dense model
    _check_reachable(settings, say)  # before any stage runs or OUT is written
    if fine_tunes_teacher:
        say(f"{settings.model} has no trained head for task {settings.data.task}: a teacher is fine-tuned first")
    run = _Run(settings, out, say, runtime_asked=asked)
    check_outputs(run.recipe(run.undecided()), run.run_dir, plan(run.recipe(run.undecided()), run.run_dir))
    # one run at a time on OUT: a second run would interleave with this one (each removing the other's
    # half-written stages); it is refused in one line instead
    with output_lock(out):
        try:
            report = run.execute(fine_tunes_teacher)
        finally:
            run.dense_exports.close()
    return report


class _Run:
    """One compress run: its settings, directories and what it decided so far; :meth:`execute` runs it."""

    def __init__(self, settings: CompressSettings, out: Path, say: _Said, *, runtime_asked: str) -> None:
        self.settings, self.out, self.say = settings, out, say
        self.runtime_asked = runtime_asked  # "auto" where the runtime was chosen by timing the dense model
        self.run_dir = out / STAGES
        self.dense_exports = DenseExports(settings.data, settings.task_settings)
        self.clock = _Clock(settings.seconds)
        self.stage_count: dict[str, Any] | None = None  # the stage count chosen for the time budget, not asked for
        #: a time budget's measured choice whether the teacher store pays on this machine (the first stage's probe)
        self.store_choice: dict[str, Any] | None = None
        #: each stage's precisions where a time budget timed them (:meth:`timed_rates`), by stage number
        self.precisions: dict[int, dict[str, Any]] = {}
        if settings.plan is not None and not settings.plan.teacher_store:  # the budget.json of a run that did not
            self.compute_teacher_at_every_step()

    @property
    def store(self) -> str | None:
        """The one store of the teacher's outputs every training stage reads: a budget that trains, unless
        --teacher-store-gb 0, a time budget's probe or the budget.json replayed turned it off (None)."""
        if self.settings.chosen.trains and self.settings.teacher_store_gb > 0:
            return str(self.run_dir / TEACHER_STORE)
        return None

    def compute_teacher_at_every_step(self) -> None:
        """No teacher store from here on: every training stage runs the teacher at every step."""
        self.settings = dataclasses.replace(self.settings, teacher_store_gb=0.0)

    def choose_store(self, rates: Throughput) -> dict[str, Any]:
        """Whether to keep the teacher store: where storing a text's outputs and reading them back costs less than the
        teacher's pass on this machine (``rates``: the first stage's probe); else the run says why it drops it."""
        ms = {"teacher_ms": 1000 * rates.teacher_pass(), "storing_ms": 1000 * rates.storing,
              "reading_ms": 1000 * rates.reading}
        if not rates.store_pays():
            self.say(f"the teacher's outputs are computed at every step, not stored: here storing a text's outputs and "
                     f"reading them back take {ms['storing_ms']:.2f} + {ms['reading_ms']:.2f} ms, more than the "
                     f"teacher's pass ({ms['teacher_ms']:.2f} ms)")
        return {"stored": rates.store_pays(), **{k: round(v, 3) for k, v in ms.items()}}

    def follow_store_choice(self, choice: dict[str, Any]) -> None:
        """Act on the first stage's store choice, made now (:meth:`choose_store`) or read from an earlier run's record
        (a resumed run keeps the interrupted one's)."""
        self.store_choice = choice
        if not choice["stored"]:
            self.compute_teacher_at_every_step()

    @property
    def count(self) -> int:
        return self.settings.step_count

    def undecided(self, decided: list[Step] | None = None) -> list[Step]:
        """``decided`` and the stages after them, at their targets, not yet allocated."""
        decided = decided or []
        return [*decided, *(Step(t) for t in self.settings.targets[len(decided):])]

    def recipe(self, steps: list[Step], *, finetune: StageCounts | None = None) -> Recipe:
        return self.settings.recipe(steps, finetune=finetune, store=self.store)

    def execute(self, fine_tunes_teacher: bool) -> dict[str, Any]:
        """Allocate and train each compression stage in turn, then fine-tune, export, measure and report."""
        settings = self.settings
        if fine_tunes_teacher:  # a time budget counts from when the teacher exists
            run_recipe(prefix(self.recipe(self.undecided()), "teacher"), self.run_dir, on_stage=_on_stage(self.say))
        self.clock.begin()
        if settings.stages is None and settings.plan is None and settings.seconds is not None and self.count > 1:
            settings = self.settings = self.stages_for_time()
        decided: list[Step] = []
        records: list[dict[str, Any]] = []
        finetune: StageCounts | None = None
        for k in range(1, self.count + 1):
            step, record = self.decide(k, decided)
            decided.append(step)
            records.append(record)
            if record.get("finetune") is not None:
                finetune = StageCounts(**record["finetune"])
            if k < self.count and settings.chosen.trains:  # train this stage: the next one scores what it learned
                run_recipe(prefix(self.recipe(self.undecided(decided)), stage_name("distill", k)), self.run_dir,
                           on_stage=_on_stage(self.say))
        if finetune is not None and settings.seconds is not None and "planned_seconds" in records[-1]:
            finetune = self.finetune_after_distilling(decided, records)
        recipe = self.recipe(decided, finetune=finetune)
        run_recipe(recipe, self.run_dir, on_stage=_on_stage(self.say), deadlines=self.deadlines(records))
        stages = {p.stage.name: p.directory for p in plan(recipe, self.run_dir)}
        training = training_summary(recipe, self.run_dir)
        # where a deadline ended the last training stage, if it did
        stopped = next((row for row in training if row["stage"] == "final" and row["stopped_at"] is not None), None)
        if stopped is not None:
            self.say(f"the last training stage stopped at step {stopped['stopped_at']:,} of its "
                     f"{stopped['schedule_steps']:,} at the budget's deadline (this machine ran slower than it was "
                     f"timed); {BUDGET_FILE} records the step, so a re-run from it trains the same bytes")
        final = _measure(dense_model(stages, settings.model), shipped_model(stages, settings.deployment),
                         settings.deployment, settings.rounds,
                         shipped_is_export=target(settings.deployment.runtime).graph is not None,
                         dense_exports=self.dense_exports, every_deployment=True, say=self.say)
        last = records[-1]
        report = _report(settings, stages, last["attempts"], final, last.get("choice"))
        report["compression_stages"] = [{"step": k, "target": r["target"], "allocated_for": r["allocated_for"],
                                         "structure": [r.get("keep_layers"), r.get("hidden_width")],
                                         "measured": next((a["measured"] for a in r["attempts"] if a.get("kept")),
                                                          r["attempts"][-1]["measured"]),
                                         "counts": r.get("counts")} for k, r in enumerate(records, 1)]
        report["training"] = training
        report["runtime_asked"] = self.runtime_asked
        report["precision"] = settings.precision
        if self.precisions:
            report["precisions_timed"] = [self.precisions.get(k) for k in range(1, self.count + 1)]
        report["trained_on"] = training_device_name() if settings.chosen.trains else None
        report["dropout"] = settings.chosen.dropout
        report["teacher_store"] = self.store_choice
        if self.stage_count is not None:
            report["stage_count"] = self.stage_count
        report["time"] = self.clock.summary(self.run_dir)
        if settings.chosen.trains and self.clock.seconds is not None:
            distill, finetune_counts = [r.get("counts") for r in records], records[-1].get("finetune")
            if stopped is not None:  # the last training stage (the fine-tune, else the last distillation) ends there
                if finetune_counts is not None:
                    finetune_counts = {**finetune_counts, "stop_step": stopped["stopped_at"]}
                else:
                    distill[-1] = {**distill[-1], "stop_step": stopped["stopped_at"]}
            plan_counts = {"distill": distill, "finetune": finetune_counts, "seconds": self.clock.planned,
                           "teacher_store": self.store is not None}
            write_text_atomically(self.out / BUDGET_FILE, json.dumps(plan_counts, indent=2))
            report["budget_file"] = str(self.out / BUDGET_FILE)
        _write_report(self.out, report)
        self.say(f"measured {final['measured']:.2f}x (target {settings.speedup:g}x) in "
                 f"{settings.deployment.describe()}; wrote {self.out / REPORT_MD}")
        return report

    def deadlines(self, records: list[dict[str, Any]]) -> dict[str, Deadline]:
        """A time budget's deadline for its last training stage (``final``): the stages before it are followed by
        plans made again from the time then left, but nothing after the last can absorb the machine running slower
        than it was timed (this 2-core VM's speed moves by a fifth from minute to minute). None for counts given
        (a budget.json ends where it says)."""
        if self.clock.seconds is None or "throughput" not in records[-1]:
            return {}
        evaluation = Throughput(**records[-1]["throughput"]).evaluate * self.sizes()["validation"]
        return {"final": self.clock.deadline(evaluation)}

    def finetune_after_distilling(self, decided: list[Step], records: list[dict[str, Any]]) -> StageCounts:
        """The fine-tune's counts for a time budget, planned again once the last distillation has trained: for the
        time then left, at the throughput measured before it, scaled by the distillation's pace against its plan
        (:func:`distillation_pace`: the probe's few steps miss some of a long run's, either way). Kept in the last
        stage's record, so a resumed run trains what the interrupted one planned."""
        record, k = records[-1], self.count
        if record.get("finetune_after_distilling"):
            return StageCounts(**record["finetune"])
        recipe = self.recipe(decided, finetune=StageCounts(**record["finetune"]))
        distill = stage_name("distill", k)
        run_recipe(prefix(recipe, distill), self.run_dir, on_stage=_on_stage(self.say))
        walls = self.clock.recorded(self.run_dir)
        directory = next(p.directory.name for p in plan(recipe, self.run_dir) if p.stage.name == distill)
        planned = record["planned_seconds"]["distill"]
        wall = walls.get(directory, planned)
        loop, evaluations = _training_seconds(self.run_dir / directory, wall)
        pace = distillation_pace(loop, planned)
        rates = Throughput(**record["throughput"]).slowed(pace)
        sizes = self.sizes()
        evaluation = rates.evaluate * sizes["validation"]
        # what the run has spent: this process's clock, or on a resumed run at least the stages' recorded times
        spent = max(self.clock.elapsed(), sum(walls.values()))
        # the fine-tune's stage also loads, evaluates after each epoch and saves, as the distillation's did
        left = self.clock.seconds - spent - stage_overhead(wall, loop, evaluations, evaluation) \
            - ending_seconds(2 * evaluation, self.clock.later_overhead())
        texts = sizes["texts"]
        seen = max(min(texts, r["counts"]["max_samples"] or texts) for r in records)
        finetune, cost = finetune_with_evaluations(left, sizes["labelled"], rates,
                                                   labelled_seen(seen, texts, sizes["labelled"]), evaluation=evaluation,
                                                   evaluate_first=self.settings.chosen.evaluate_first)
        self.clock.overrun("the fine-tune", finetune, sizes["labelled"], left, self.say, rates.per_step())
        finetune = fewest(finetune, sizes["labelled"], rates.per_step()).in_precisions(record.get("precision"))
        self.clock.planned["finetune"] = cost
        self.say(f"the fine-tune planned again after the last distillation, which took {walls.get(directory, 0):.0f} s "
                 f"of a planned {planned:.0f} s: {finetune.describe(sizes['labelled'], rates.per_step())} (examples), "
                 f"about {cost:.0f} s of the {max(0.0, left):.0f} s left")
        record |= {"finetune": finetune.to_json(), "finetune_after_distilling": {"pace": pace, "left": left}}
        compress_record.write(self.out, record, name=self.record_name(k))
        return finetune

    def record_name(self, k: int) -> str:
        """The file of stage ``k``'s allocation and counts: ``allocation.json`` for one stage, else numbered."""
        return ALLOCATION if self.count == 1 else f"allocation-{k}.json"

    def stages_for_time(self) -> CompressSettings:
        """The settings with as many compression stages as the time budget is worth (:func:`stages_worth_it`),
        predicted from how long the teacher's evaluation and scores took: they run now (every stage count runs
        them first). A resumed run reads their recorded times, and so decides as the interrupted one did."""
        recipe = prefix(self.recipe(self.undecided()), "importance")
        run_recipe(recipe, self.run_dir, on_stage=_on_stage(self.say))
        walls = self.clock.recorded(self.run_dir)
        directories = {p.stage.name: p.directory.name for p in plan(recipe, self.run_dir)}
        scoring = sum(walls.get(directory, 0.0) for name, directory in directories.items() if name != "teacher")
        evaluation = walls.get(directories.get("teacher-eval", ""), 0.0)
        count = stages_worth_it(self.settings.seconds, self.count, scoring=scoring, evaluation=evaluation)
        self.stage_count = {"stages": count, "by_target": self.count, "scoring_seconds": scoring}
        if count < self.count:
            self.say(f"--budget {self.settings.budget}: {described_count(self.stage_count)} (--stages {self.count} "
                     "asks for them anyway)")
        return dataclasses.replace(self.settings, stages=count)

    def decide(self, k: int, decided: list[Step]) -> tuple[Step, dict[str, Any]]:
        """Compression stage ``k``'s allocation (kept from an earlier run with the same settings, else chosen and
        timed now) and the counts its training takes; and the record of both (``allocation.json``)."""
        settings = self.settings
        key = settings.record() if self.count == 1 else \
            {**settings.record(), "step": k, "before": [s.to_json() for s in decided]}
        name = self.record_name(k)
        saved = compress_record.read(self.out, key, name=name)
        if saved is not None:
            record = saved.model_dump(exclude_unset=True)
            self.say(f"the allocation of stage {k} of the earlier run ({saved.allocated_for:.2f}x predicted, measured "
                     f"{saved.kept().measured:.2f}x) is kept: {self.out / name}" if self.count > 1 else
                     f"the allocation of the earlier run ({saved.allocated_for:.2f}x predicted, measured "
                     f"{saved.kept().measured:.2f}x) is kept: {self.out / name}")
            if record.get("teacher_store") is not None:  # the first stage's store choice, as the earlier run made it
                self.follow_store_choice(record["teacher_store"])
        else:  # a new stage: counts() makes and follows the store choice before it plans
            started = self.clock.stage_started = time.monotonic()
            structure, allocated, allocation, attempts, choice = _allocate(self, k, decided)
            record = {"settings": key, "allocated_for": allocated, "keep_layers": structure.keep_layers,
                      "hidden_width": structure.hidden_width, "attempts": attempts, "choice": choice,
                      "prune": allocation, "target": settings.targets[k - 1]}
            step = Step(allocated, structure, allocation)
            record |= self.counts(k, [*decided, step])
            self.clock.overheads.append(time.monotonic() - started)
            self.out.mkdir(parents=True, exist_ok=True)  # the stages made it; a caller's own runner may not have
            compress_record.write(self.out, record, name=name)
        record.setdefault("target", settings.targets[k - 1])
        if record.get("precision") is not None:  # a later stage's teacher runs as this one's did
            self.precisions[k] = record["precision"]
        counts = record.get("counts")
        step = Step(record["allocated_for"], Structure(record.get("keep_layers"), record.get("hidden_width")),
                    record.get("prune"), None if counts is None else StageCounts(**counts))
        return step, record

    def counts(self, k: int, steps: list[Step]) -> dict[str, Any]:
        """The examples and epochs stage ``k``'s distillation (and, at the last stage, the fine-tune) trains on:
        an earlier run's ``budget.json``'s, or, for a time budget, what fills the time left at the throughput of
        this stage's pruned model measured now; none for a named budget (its own counts)."""
        settings = self.settings
        last = k == self.count
        if not settings.chosen.trains:
            return {}
        if settings.plan is not None:
            plan_counts = settings.plan
            return {"counts": plan_counts.distill[k - 1].to_json(),
                    "finetune": plan_counts.finetune.to_json() if last and plan_counts.finetune else None}
        if settings.seconds is None:
            return {}
        recipe = self.recipe(self.undecided(steps))
        stages = {p.stage.name: p.directory for p in plan(recipe, self.run_dir)}
        pruned = stages[stage_name("prune", k)]
        run_recipe(prefix(recipe, stage_name("prune", k)), self.run_dir, on_stage=_on_stage(self.say))
        teacher = stages.get("teacher") or Path(str(settings.teacher))
        rates, precision = self.timed_rates(k, pruned, teacher)
        if k == 1 and self.store is not None:
            self.follow_store_choice(self.choose_store(rates))
        result = self.clock.plan_stage(k, self.count, rates if self.store is not None else rates.without_store(),
                                       self.sizes(), last=last, finetunes=not settings.embeddings, say=self.say,
                                       refuse=self.count == 1 or self.stage_count is None)
        if precision is not None:
            result |= {"precision": precision, **{key: StageCounts(**result[key]).in_precisions(precision).to_json()
                                                  for key in ("counts", "finetune") if result.get(key) is not None}}
        return result | ({"teacher_store": self.store_choice} if k == 1 and self.store_choice is not None else {})

    def timed_rates(self, k: int, pruned: Path, teacher: Path) -> tuple[Throughput, dict[str, Any] | None]:
        """Stage ``k``'s throughput, measured now in the run's precision; where ``--mixed-precision auto`` chose
        bf16, in float32 as well, the teacher's passes and the student's steps then each in the precision
        :func:`fastest_precisions` picks (a later stage's teacher in the first one's: its stored outputs are keyed
        by it); and that choice (None: not timed)."""
        settings = self.settings
        candidates = dict.fromkeys([settings.precision, *(["no"] if settings.mixed_precision == "auto" else [])])
        by_precision = {p: training_throughput(pruned, teacher, settings.data, settings.task_settings,
                                               weights=DistillWeights(**settings.distill_weights), precision=p,
                                               dropout=settings.chosen.dropout, seed=settings.seed)
                        for p in candidates}
        if len(by_precision) == 1:
            return by_precision[settings.precision], None
        first = self.precisions.get(1)
        rates, choice = fastest_precisions(by_precision, teacher=None if first is None else first["teacher"])
        self.say(f"stage {k}: the teacher's passes in {precision_name(choice['teacher'])}, the student's steps in "
                 f"{precision_name(choice['student'])} (timed here, ms an example: " +
                 "; ".join(f"{precision_name(p)} {ms['teacher']:.2f} and {ms['student']:.2f}"
                           for p, ms in choice["ms"].items()) + ")")
        return rates, choice

    def sizes(self) -> dict[str, int]:
        """The texts distillation may read (the training split's and ``--unlabelled``'s, and their masked copies), the
        labelled examples and the validation examples."""
        if not hasattr(self, "_sizes"):
            kind = task_kind(self.settings.data, self.settings.task_settings)
            dataset = dataset_for(kind.preset, self.settings.data.dataset)
            train = load_split(dataset, kind.preset, "train", require_labels=False)
            validation = load_split(dataset, kind.preset, kind.preset.validation_split,
                                    validation_file=self.settings.data.validation_file, require_labels=False)
            extra = len(load_unlabelled(self.settings.unlabelled, kind.with_data(train)).rows) \
                if self.settings.unlabelled else 0
            copies = 1 + self.settings.chosen.masked_copies  # the texts, and their masked copies
            self._sizes = {"texts": (len(train.rows) + extra) * copies, "labelled": len(train.rows),
                           "validation": len(validation.rows)}
        return self._sizes


class _Clock:
    """A budget stated in time: when the run started, what the compression stages' allocations took, and the plan
    of each training stage made as the run goes (re-planned at every stage from the time left)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.start: float | None = None
        self.overheads: list[float] = []  # the seconds each stage's scoring, allocation, timing and tuning took
        self.stage_started: float | None = None  # when the stage being allocated began
        self.planned: dict[str, float] = {}
        self.finetune_reserve: float | None = None
        self.seen = 0  # texts the teacher has read in the stages planned so far

    def begin(self) -> None:
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return 0.0 if self.start is None else time.monotonic() - self.start

    def later_overhead(self) -> float:
        """What a later stage's scoring, allocation, tuning and timing take: as long as a later stage took so far,
        else half of what the first took up to now (it also evaluated the teacher, scored it and compared candidate
        allocations, which later stages do not; on STS-B at 3x: 531 s for the first, about 180 s for the second)."""
        later = self.overheads[1:]
        first = self.overheads[:1] or ([] if self.stage_started is None else [time.monotonic() - self.stage_started])
        return max(later) if later else LATER_STAGE_SHARE * first[0] if first else 0.0

    def plan_stage(self, k: int, count: int, rates: Throughput, sizes: dict[str, int], *, last: bool,
                   finetunes: bool, say: Callable[[str], None], refuse: bool = True) -> dict[str, Any]:
        """The counts of stage ``k`` of ``count`` (and of the fine-tune, at the last), from the time left.
        ``refuse`` False: not even the first stage refuses a budget too small (its stage count was predicted, not
        asked for)."""
        assert self.seconds is not None
        overhead = self.later_overhead()  # each later stage's scoring, allocation, tuning and timing
        # what is still to come besides training: the later stages' scoring and allocation, and the run's end
        ending = ending_seconds(2 * rates.evaluate * sizes["validation"], overhead)
        left = self.seconds - self.elapsed() - overhead * (count - k) - ending
        if self.finetune_reserve is None:
            self.finetune_reserve = FINETUNE_SHARE * left if finetunes else 0.0
        distill_seconds = (left - self.finetune_reserve) / (count - k + 1)
        counts, cost, self.seen = distill_counts(distill_seconds, sizes["texts"], self.seen, rates)
        per_step = rates.per_step()
        self.planned[f"distill {k}"] = cost
        result: dict[str, Any] = {"counts": counts.to_json(), "throughput": dataclasses.asdict(rates)}
        # before any training a budget too small for the stages asked for is refused; once a stage has trained (or
        # where the stage count was predicted), the run finishes with the fewest steps worth running, over its time
        # (the user's minutes are already spent: a refusal would waste them)
        check = check_counts if k == 1 and refuse else \
            lambda stage, counts, available, seconds, per_step: self.overrun(stage, counts, available, seconds, say,
                                                                             per_step)
        check(f"distill {k}", counts, sizes["texts"], distill_seconds, per_step)
        counts = fewest(counts, sizes["texts"], per_step)
        result["counts"] = counts.to_json()
        result["planned_seconds"] = {"distill": cost}
        if last and finetunes:
            finetune, cost = finetune_counts(left - cost, sizes["labelled"], rates,
                                             labelled_seen(self.seen, sizes["texts"], sizes["labelled"]))
            check("the fine-tune", finetune, sizes["labelled"], left - cost, per_step)
            finetune = fewest(finetune, sizes["labelled"], per_step)
            self.planned["finetune"] = cost
            result["finetune"] = finetune.to_json()
        say(f"stage {k} of {count}: {self.elapsed():.0f} s spent of {self.seconds:.0f} s; distillation on "
            f"{counts.describe(sizes['texts'], per_step)} (texts), about {self.planned[f'distill {k}']:.0f} s at "
            f"{1 / (rates.distill + rates.teacher):.1f} new texts/s" +
            (f"; the fine-tune on {finetune.describe(sizes['labelled'], per_step)} (examples)"
             if "finetune" in result else ""))
        return result

    def overrun(self, stage: str, counts: StageCounts, available: int, seconds: float,
                say: Callable[[str], None], per_step: float) -> None:
        """Say that ``stage`` trains the fewest steps worth running, past the budget, where its time is spent."""
        least = fewest(counts, available, per_step)
        if least != counts:
            say(f"the budget leaves {max(0.0, seconds):.0f} s for {stage}: it trains the fewest steps worth running "
                f"({least.examples(available, per_step):,} examples), and the run ends after its "
                f"{self.seconds:.0f} s; give a larger --budget or fewer --stages to stay within it")

    def deadline(self, evaluation: float) -> Deadline:
        """When the last training stage must end for the run to end on time: the budget less what follows it (the
        evaluation after its last step, ``evaluation`` seconds, and the end the plan reserved: two evaluations of the
        compressed model, the export, the last timing); never before the fewest steps worth running."""
        assert self.seconds is not None
        left = self.seconds - self.elapsed() - evaluation - ending_seconds(2 * evaluation, self.later_overhead())
        return Deadline(at=time.time() + left, least=MIN_STEPS)

    @staticmethod
    def recorded(run_dir: Path) -> dict[str, float]:
        """The wall time of each stage the recipe runner ran in ``run_dir`` (by its directory's name), as recorded:
        a stage an earlier call ran keeps its own time."""
        stages: dict[str, float] = {}
        report = run_dir / "report.json"
        if report.is_file():
            for row in json.loads(report.read_text()).get("stages", []):
                if row.get("wall_time") is not None:
                    stages[row["stage"]] = row["wall_time"]
        return stages

    def summary(self, run_dir: Path) -> dict[str, Any]:
        """What the run spent, and on what (the recipe runner's wall time of each stage)."""
        return {"budget_seconds": self.seconds, "seconds": self.elapsed(), "planned": self.planned,
                "stages": self.recorded(run_dir)}


def _training_seconds(stage: Path, wall: float) -> tuple[float, int]:
    """The seconds a training stage's epochs took by the loop's own clock and how many evaluations it ran, from its
    ``training.json``; (``wall``, 0) where there is none to read."""
    try:
        summary = json.loads((stage / "training.json").read_text())
        return sum(e["wall"] for e in summary["epoch_seconds"]), len(summary.get("evaluations", []))
    except (OSError, ValueError, KeyError, TypeError):
        return wall, 0


def _resolved(settings: CompressSettings, out: Path, say: Callable[[str], None]) -> tuple[CompressSettings, bool]:
    """``settings`` with what the run reads decided: the teacher (the model itself where it has a trained head for
    the task), whether whole layers and residual channels may go; and whether a teacher is fine-tuned first.
    A missing dataset, column or label, a teacher the budget cannot train and an output among the inputs are
    refused here, before anything runs."""
    _check_data(settings.data, settings.task_settings)
    fine_tunes_teacher = settings.teacher is None and _needs_teacher(settings)
    if fine_tunes_teacher and not settings.chosen.trains:
        raise GhostifyError(f"--budget {settings.budget} prunes a model fine-tuned for the task without training it, "
                            f"but {settings.model} has no trained head for task {settings.data.task}: fine-tune it "
                            "first (`ghostify finetune`) and compress that, pass --teacher, or use --budget quick")
    teacher = settings.model if settings.teacher is None and not fine_tunes_teacher else settings.teacher
    check_disjoint([out], [(label, str(path)) for label, path in (("model", settings.model), ("teacher", teacher),
                                                                   ("dataset", settings.data.dataset))
                           if path is not None])
    hidden = _hidden_axis(settings, say)
    return dataclasses.replace(settings, teacher=teacher, prune_hidden=hidden, drop_layers=settings.layers_axis), \
        fine_tunes_teacher


def _needs_teacher(settings: CompressSettings) -> bool:
    """Whether the model lacks a trained head for the task (then compress fine-tunes a teacher first)."""
    return task_kind(settings.data, settings.task_settings).head_labels(load_config(settings.model)) is None


def _check_data(data: DataSettings, task_settings: TaskSettings) -> None:
    """Read a few rows of both splits now: a missing dataset, column or label is one line before anything runs
    (the embeddings task reads no labels: its last distillation is the result)."""
    kind = task_kind(data, task_settings)
    if kind.can_finetune() and kind.needs_labels:
        raise GhostifyError(kind.can_finetune())
    dataset = dataset_for(kind.preset, data.dataset)
    for split in ("train", kind.preset.validation_split):
        load_split(dataset, kind.preset, split, max_samples=8, validation_file=data.validation_file,
                   require_labels=kind.needs_labels)


def _hidden_axis(settings: CompressSettings, say: Callable[[str], None]) -> bool:
    """Whether the allocation may cut residual channels: as asked, else where the model's interface keeps its
    shape (not for sentence embeddings: their output width is the hidden size) and the budget trains (a cut
    stream's norms average over fewer channels: only training recovers it, so ``none`` never cuts it; asking for
    it there was refused with the settings)."""
    if settings.prune_hidden is not None:
        return settings.prune_hidden
    if not settings.chosen.trains:
        return False
    if settings.embeddings:
        say("the hidden size stays: a sentence embedding is as wide as it (--prune-hidden cuts it anyway)")
        return False
    return True


def _check_reachable(settings: CompressSettings, say: Callable[[str], None]) -> None:
    """Refuse a speed-up that even one head and one FFN neuron per layer (in one layer, where layers may be
    dropped; at the narrowest hidden size measured, where channels may be cut) would not reach, before any stage
    runs (:func:`ghostify.steps.latency_plan.check_reach`). The latency model comes from this machine's cache, or is
    measured into it now: the latency stage then reads it from there, and a refusal leaves nothing in OUT."""
    deployment = settings.deployment
    costs = measure_latency(settings.model, runtime=deployment.runtime, batch_size=deployment.batch_size,
                            seq_len=deployment.seq_len, threads=deployment.threads, progress=say)
    check_reach(settings.model, costs, settings.speedup, layers=settings.layers_axis, hidden=bool(settings.prune_hidden))


def _allocate(run: _Run, k: int, decided: list[Step]) -> tuple[Structure, float, dict[str, Any],
                                                        list[dict[str, Any]], dict[str, Any] | None]:
    """Choose compression stage ``k``'s allocation (after the ``decided`` stages) and time it (re-allocating where
    it misses the stage's target): the structure, the speed-up and the prune settings of the attempt measured
    closest to the target, every attempt, and the choice."""
    settings, say, run_dir = run.settings, run.say, run.run_dir
    target = settings.targets[k - 1]
    layers, hidden = settings.layers_axis, bool(settings.prune_hidden)

    def recipe(step: Step, *, tune: bool = True) -> Recipe:
        return run.recipe(run.undecided([*decided, dataclasses.replace(step, tune=tune)]))

    structure = Structure()
    if layers or hidden:
        structure = _structure(recipe(Step(target)), run_dir, target, layers, hidden, say, k)
    # the candidates are compared, and the allocations timed, untuned: mask tuning changes weights, not the speed,
    # so it runs once, on the allocation kept (the recipe built with ``tune`` is the one switch)
    choice = _choose(recipe(Step(target, structure), tune=False), run_dir, target, settings.seed, say, k,
                     samples=settings.compare_samples, trains=settings.chosen.trains)

    def attempt(goal: float, replan: bool) -> dict[str, Any]:
        """Allocate for a predicted ``goal`` (``replan``: the layers and channels too) and time it."""
        nonlocal structure
        if replan:
            structure = _structure(recipe(Step(goal)), run_dir, goal, layers, hidden, say, k)
            run_recipe(prefix(recipe(Step(goal, structure)), stage_name("prune", k), before=True), run_dir,
                       on_stage=_on_stage(say))
        allocation = _allocation(recipe(Step(goal, structure), tune=False), run_dir, choice, goal, k)
        measured = _allocate_and_measure(recipe(Step(goal, structure, allocation), tune=False), run_dir,
                                         settings.deployment, settings.rounds, say, run.dense_exports, goal, k)
        return {**measured, "structure": list(structure), "prune": allocation}

    attempts = [attempt(target, replan=False)]
    attempts += _corrections(attempts[0], target, settings.tolerance, attempt, structural=layers or hidden, say=say)
    kept = closest(attempts, target)
    for a in attempts:
        a["kept"] = a is kept
    return Structure(*kept["structure"]), kept["allocated_for"], kept["prune"], attempts, choice


def _corrections(first: dict[str, Any], speedup: float, tolerance: float,
                 attempt: Callable[[float, bool], dict[str, Any]], *, structural: bool,
                 say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The re-allocations after ``first`` missed ``speedup`` by more than ``tolerance``: the target scaled by the
    miss (predicted / measured), with the same layers and channels; where those cannot reach it and whole layers
    or channels may go (``structural``), re-planned for it, and then, if that misses too, corrected once more with
    the new structure's own miss (the latency model's error depends on the structure: on MiniLM at 6x, 2 layers
    measured 5.21x for 6.24x predicted and 1 layer 7.15x for 7.31x). Each refusal is said and ends the
    corrections; the caller keeps whichever attempt measured closest to the target."""
    def missed(a: dict[str, Any]) -> bool:
        return abs(a["measured"] / speedup - 1) > tolerance

    def corrected(a: dict[str, Any]) -> float:
        return speedup * a["predicted"] / a["measured"]

    if not missed(first):
        return []
    target = corrected(first)
    say(f"measured {first['measured']:.2f}x for a predicted {first['predicted']:.2f}x: re-allocating for a "
        f"predicted {target:.2f}x")
    try:
        return [attempt(target, False)]
    except GhostifyError as exc:  # e.g. the corrected target is beyond what these layers can reach
        if not structural:
            say(f"the re-allocation failed, the first allocation is kept: {exc}")
            return []
        say(f"these layers cannot reach it ({exc}): planning the layers and channels again for {target:.2f}x")
    found: list[dict[str, Any]] = []
    try:
        found.append(attempt(target, True))
        if missed(found[-1]):
            again = corrected(found[-1])
            say(f"measured {found[-1]['measured']:.2f}x for a predicted {found[-1]['predicted']:.2f}x with these "
                f"layers: re-allocating for a predicted {again:.2f}x")
            found.append(attempt(again, False))
    except GhostifyError as exc:
        say(f"the re-allocation failed: {exc}")
    return found


class _NoAllocation(GhostifyError):
    """The chosen kind of allocation has none for a corrected target (no uniform width reaches it)."""


def _allocation(recipe: Recipe, run_dir: Path, choice: dict[str, Any] | None, allocated: float,
                k: int = 1) -> dict[str, Any]:
    """Compression stage ``k``'s prune settings for the allocation ``choice`` picked (:func:`_choose`), for a
    predicted ``allocated`` speed-up: the latency search by its criterion, or the uniform width for that target."""
    name = (choice or {}).get("chosen", SEARCH)
    stages = {p.stage.name: p for p in plan(recipe, run_dir)}
    prune = stage_name("prune", k)
    settings = candidate_settings(name, stages[prune].arguments["model"], stages["latency"].directory, allocated)
    if settings is None:
        raise _NoAllocation(f"no uniform width keeps a head in every layer within a predicted {allocated:.2f}x")
    if "latency" in settings:
        settings["latency"] = "${latency}"  # the run's own stage, as the recipe names it
    importance = recipe.stages[[s.name for s in recipe.stages].index(prune)].settings.get("importance")
    if importance is not None:  # the scores of the model before its channels went (compress_recipe)
        settings["importance"] = importance
    return settings


def _choose(recipe: Recipe, run_dir: Path, speedup: float, seed: int, say: Callable[[str], None],
            k: int = 1, *, samples: int = CompressDefaults.compare_samples,
            trains: bool = False) -> dict[str, Any] | None:
    """Which allocation starts best, before any training or tuning (``recipe``: the untuned one;
    :func:`ghostify.steps.fidelity.choose_allocation`): the latency search by each loss criterion (and rearranged),
    or uniform width of the same predicted latency, by the task's metric where the data has labels (a tie, where
    the run ``trains``, to a search), else by the distance to the teacher."""
    run_recipe(prefix(recipe, stage_name("prune", k), before=True), run_dir, on_stage=_on_stage(say))
    stages = {p.stage.name: p for p in plan(recipe, run_dir)}
    pruned = stages[stage_name("prune", k)]
    teacher = stages["teacher"].directory if "teacher" in stages else Path(recipe.header.teacher)
    settings = {k: v for k, v in pruned.arguments.items()  # its own settings, the scores it reads among them
                if k not in ("model", "speedup", "latency", "output", "criterion", "rearrange", "width")}
    settings.setdefault("seed", seed)
    with tempfile.TemporaryDirectory(prefix=".candidates-", dir=run_dir) as tmp:
        choice = choose_allocation(Path(pruned.arguments["model"]), teacher, stages["latency"].directory, speedup,
                                   Path(tmp), prune_settings=settings, samples=samples,
                                   seed=seed + 1, trains=trains)
    if choice is not None:
        gaps = ", ".join(f"{name} {gap:.4g}" for name, gap in choice["gaps"].items())
        scores = "" if "metrics" not in choice else ", ".join(
            f"{name} {value:.4f}" for name, value in choice["metrics"].items())
        say(f"before training, on {choice['samples']} training examples the scores did not read: "
            + (f"{choice['metric']} {scores} (one standard error {choice['standard_error']:.3g}); " if scores else "")
            + f"distance to the teacher {gaps}; {described(choice)} is kept")
    return choice


class _Said:
    """What compress says: its own lines, and each stage's status, once per stage: the runner is re-entered
    for prefixes of the recipe, and reports again as skipped every stage an earlier prefix ran or skipped."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say, self.stages = say, set()

    def __call__(self, line: str) -> None:
        self.say(line)

    def stage(self, planned: Any, status: str) -> None:
        if status == "skipped" and planned.label in self.stages:
            return
        self.stages.add(planned.label)
        self.say(f"{planned.label}: {status}")


def _on_stage(say: Callable[[str], None]) -> Callable[[Any, str], None]:
    """The runner's report of each stage to ``say``: once a stage when it is compress's own (:class:`_Said`)."""
    return say.stage if isinstance(say, _Said) else lambda planned, status: say(f"{planned.label}: {status}")


def _structure(recipe: Recipe, run_dir: Path, speedup: float, layers: bool, hidden: bool,
               say: Callable[[str], None], k: int = 1) -> Structure:
    """Run the stages up to the importance scores, then allocate ``speedup`` with whole ``layers`` and residual
    channels (``hidden``) as candidates too (:func:`ghostify.steps.latency_plan.plan_structure`, by the
    importance stage's layer and channel scores): the layers to keep when the plan removes any (else None), and
    the hidden width to keep when it cuts channels (else None)."""
    scores = stage_name("importance", k)
    run_recipe(prefix(recipe, scores), run_dir, on_stage=_on_stage(say))
    stages = {p.stage.name: p.directory for p in plan(recipe, run_dir)}
    planned = plan_structure(stages[scores], stages[scores], stages["latency"], speedup, layers=layers, hidden=hidden)
    if planned is None:
        return Structure()
    keep = planned.layers if planned.dropped else None
    if keep is not None:
        say(f"removing whole layers {','.join(map(str, planned.dropped))} costs less importance per ms saved than their "
            f"heads and neurons: drop-layers keeps {','.join(map(str, planned.layers))}, prune allocates the rest")
    of = load_config(stages[scores]).hidden_size if planned.hidden is not None else None
    width = f"{planned.hidden}/{of}" if planned.hidden is not None and planned.hidden < of else None
    if width is not None:
        say(f"residual channels cost less importance per ms saved than the last heads and neurons: prune-hidden keeps "
            f"{planned.hidden} of {of}, prune allocates heads and neurons at that width")
    return Structure(keep, width)


def _allocate_and_measure(recipe: Recipe, run_dir: Path, deployment: Deployment, rounds: int,
                          say: Callable[[str], None], dense_exports: DenseExports | None,
                          allocated: float, k: int = 1) -> dict[str, Any]:
    """Run the stages up to compression stage ``k``'s pruned (and, at the last, ghosted) model, then time it against
    the teacher; ``allocated``: the speed-up the allocation aimed at."""
    names = [s.name for s in recipe.stages]
    prune = stage_name("prune", k)
    ghosted = "attach-ghost" in names and names.index("attach-ghost") == names.index(prune) + 1
    last = "attach-ghost" if ghosted else prune
    run_recipe(prefix(recipe, last), run_dir, on_stage=_on_stage(say))
    stages = {p.stage.name: p.directory for p in plan(recipe, run_dir)}
    result = _measure(dense_model(stages, recipe.header.model), stages[last], deployment, rounds,
                      dense_exports=dense_exports)
    result["predicted"] = predicted_speedup(stages[prune], stages["latency"])  # at the channels it keeps
    result["allocated_for"] = allocated
    chosen = recipe.stages[names.index(prune)].settings
    result["allocation"] = UNIFORM if "width" in chosen else str(chosen.get("criterion", SEARCH))
    say(f"pruned for a predicted {result['predicted']:.2f}x: measured {result['measured']:.2f}x")
    return result


__all__ = ["ALLOCATION", "BUDGETS", "Budget", "CompressDefaults", "CompressSettings", "PLOT",
           "REPORT_JSON", "REPORT_MD", "RESCORED", "RUNTIMES", "STAGES", "compress", "compress_recipe", "data_mapping",
           "markdown"]
