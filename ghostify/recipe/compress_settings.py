"""What one ``compress`` run is asked for, checked when it is made (:class:`CompressSettings`), and the recipe it
runs (:func:`compress_recipe`: the stages of ``recipes/compress.yaml``) with the names of its stages."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from ..augment.masking import check_copies
from ..errors import GhostifyError
from ..latency_model import Deployment
from ..device import fast_bf16
from ..settings import (BUDGETS, MIXED_PRECISION, TIMED, Budget, CompressDefaults, DataSettings, TaskSettings,
                        TeacherStoreSettings, checked_speedup)
from ..runtimes import INT8, target
from .schema import TASK_KEYS, Recipe, validate
from .time_budget import StageCounts, TrainingPlan, parse_duration
from .yaml_source import RecipeSource

#: the importance stage after drop-layers: scores of the model prune gets
RESCORED = "rescored"
#: the store of the teacher's outputs that every distillation and the fine-tune share, inside the run directory
TEACHER_STORE = "teacher-outputs"
#: the most compression stages a run takes (each scores, prunes and distils again)
MAX_STAGES = 6
#: mixed precision as compress takes it: "auto" (bfloat16 where the hardware has it) or the training loop's own
PRECISIONS = ("auto", *MIXED_PRECISION)


def stage_name(base: str, step: int) -> str:
    """The name of compression stage ``step``'s ``base`` stage (``prune``, ``prune-2``, ...): the first keeps the
    plain names, so a one-stage recipe is the recipe compress always ran."""
    return base if step == 1 else f"{base}-{step}"


#: the smallest speed-up a time budget reaches in two compression stages by default. MiniLM on SST-2 with
#: ``--budget 20m`` (2-core AMD EPYC, one seed): at 3x one stage kept 86.9% against two stages' 85.6%; at 6x two
#: stages 83.5% at 5.80x against one stage's 82.9% at 5.98x. From 4x each of two stages prunes at least 2x.
STAGED_FROM = 4.0


def default_stages(speedup: float, budget: str) -> int:
    """How many compression stages a run takes when ``--stages`` is not given: one for the named budgets (their
    schedule stays as it was, for comparison) and below :data:`STAGED_FROM`; from it, two (prune to the square root
    of the target, distil, score the distilled model again, prune the rest of the way, distil again), where the
    time budget is worth them (``compress`` predicts that before the first allocation)."""
    if budget in ("quick", "standard", "none") or speedup < STAGED_FROM:
        return 1
    return 2


class Structure(NamedTuple):
    """What the allocation removes besides heads and neurons: the layers it keeps (None: all) and the residual
    stream's width it keeps ("192/384"; None: all of it)."""

    keep_layers: list[int] | None = None
    hidden_width: str | None = None


@dataclass(frozen=True)
class Step:
    """One compression stage: the predicted speed-up over the original model it prunes to, what it removes besides
    heads and neurons, the prune settings its allocation chose (None: the latency search for ``target``), and the
    counts its distillation trains on (None: the budget's). ``tune`` False leaves its mask tuning out (what is
    timed and compared while its allocation is chosen: tuning changes weights, not shapes)."""

    target: float
    structure: Structure = Structure()
    allocation: dict[str, Any] | None = None
    counts: StageCounts | None = None
    tune: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "structure": list(self.structure), "allocation": self.allocation,
                "counts": None if self.counts is None else dataclasses.asdict(self.counts)}


@dataclass(frozen=True)
class CompressSettings:
    """One ``compress`` run's settings (what ``compress`` takes besides the model's output directory), each refused
    in one line when it is made, before anything is read; what the run derives from them is an attribute."""

    model: str
    speedup: float
    deployment: Deployment = Deployment(runtime=CompressDefaults.runtime)
    data: DataSettings = DataSettings()
    task_settings: TaskSettings = TaskSettings()
    #: None: the model itself when it has a trained head for the task, else one is fine-tuned from it
    teacher: str | None = None
    ghosts: bool = CompressDefaults.ghosts
    #: None: where the budget trains (:attr:`layers_axis`)
    drop_layers: bool | None = CompressDefaults.drop_layers
    #: None: decided by the run from the budget and the task (``compress._hidden_axis``)
    prune_hidden: bool | None = None
    #: a budget's name, a time (``20m``), or the ``budget.json`` of an earlier run
    budget: str = CompressDefaults.budget
    epochs: int | None = None
    importance_samples: int | None = None
    #: compression stages (None: :func:`default_stages`)
    stages: int | None = None
    #: a file of more text the distillation reads besides the training split's
    unlabelled: str | None = None
    #: masked copies of the training text the distillations read too (None: the budget's, :attr:`chosen`)
    masked_copies: int | None = None
    mixed_precision: str = CompressDefaults.mixed_precision
    #: the most the teacher store (``OUT/stages/teacher-outputs``) holds, in GiB (0: the teacher runs at every step)
    teacher_store_gb: float = TeacherStoreSettings.teacher_store_gb
    tolerance: float = CompressDefaults.tolerance
    rounds: int = CompressDefaults.rounds
    seed: int = CompressDefaults.seed

    def __post_init__(self) -> None:
        checked_speedup(self.speedup)
        self.deployment.check(auto=True)  # auto: compress picks the deployment by timing (compress_timing)
        self._budget_kind()  # refuses one that is neither a name, a time nor a budget file
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, (int, float)) \
                or not 0 < self.tolerance < 1:
            raise GhostifyError(f"tolerance {self.tolerance!r} must be between 0 and 1")
        if self.stages is not None and (isinstance(self.stages, bool) or not isinstance(self.stages, int)
                                        or not 1 <= self.stages <= MAX_STAGES):
            raise GhostifyError(f"--stages {self.stages!r} must be a whole number from 1 to {MAX_STAGES} (how many "
                                "times compress prunes and distils on the way to the target)")
        if self.mixed_precision not in PRECISIONS:
            raise GhostifyError(f"--mixed-precision {self.mixed_precision!r}: choose one of {', '.join(PRECISIONS)}")
        self.data.validate()
        self.task_settings.validate()
        TeacherStoreSettings(teacher_store_gb=self.teacher_store_gb).validate()
        if self.unlabelled is not None and not Path(self.unlabelled).expanduser().is_file():
            raise GhostifyError(f"--unlabelled {self.unlabelled} is not a file; give a .txt file of one text per line, "
                                "or a data file (.csv, .jsonl, ...) with the task's text columns")
        if self.masked_copies is not None:
            check_copies(self.masked_copies)
        if not self._base.trains:  # a budget without training takes no training settings
            for flag, given in (("--ghosts", self.ghosts), ("--epochs", self.epochs is not None),
                                ("--max-samples", self.data.max_samples), ("--unlabelled", self.unlabelled),
                                ("--masked-copies", self.masked_copies),
                                ("--mixed-precision", self.mixed_precision not in ("auto", "no"))):
                if given:
                    raise GhostifyError(f"--budget {self.budget} trains nothing, so {flag} has nothing to set; drop "
                                        f"{flag}, or use --budget quick or standard")
            if self.prune_hidden:
                raise GhostifyError("--prune-hidden cuts the residual stream, whose norms then need training to "
                                    f"recover; --budget {self.budget} trains nothing: drop --prune-hidden, or use "
                                    "--budget quick or standard")
        counted = self.seconds is not None or self.plan is not None
        if counted and (self.epochs is not None or self.data.max_samples is not None):
            flag = "--epochs" if self.epochs is not None else "--max-samples"
            raise GhostifyError(f"--budget {self.budget} chooses the examples and epochs of every stage itself, so "
                                f"{flag} has nothing to set; drop {flag}, or name a budget (quick, standard, full)")
        if self.plan is not None and self.stages is not None and self.stages != len(self.plan.distill):
            raise GhostifyError(f"--budget {self.budget} holds the counts of {len(self.plan.distill)} compression "
                                f"stage(s), not --stages {self.stages}: drop --stages, or give a time budget")

    def _budget_kind(self) -> str:
        """``named``, ``timed`` or ``file``."""
        if self.budget in BUDGETS:
            return "named"
        if parse_duration(self.budget) is not None:
            return "timed"
        path = Path(str(self.budget)).expanduser()
        if path.suffix == ".json" and path.is_file():
            return "file"
        raise GhostifyError(f"unknown --budget {self.budget!r}; choose one of {', '.join(BUDGETS)}, a time (e.g. 20m, "
                            "1h: the whole run, sized to this machine), or the budget.json an earlier run wrote")

    @functools.cached_property
    def seconds(self) -> float | None:
        """The time a timed budget gives the run (None: the budget is not a time)."""
        return parse_duration(self.budget) if self._budget_kind() == "timed" else None

    @functools.cached_property
    def plan(self) -> TrainingPlan | None:
        """The counts an earlier run chose (``--budget FILE``; None: not a file)."""
        if self._budget_kind() != "file":
            return None
        path = Path(str(self.budget)).expanduser()
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise GhostifyError(f"--budget {self.budget} is not readable JSON ({exc}); give the budget.json an "
                                "earlier run wrote") from None
        return TrainingPlan.from_json(data, str(self.budget))

    @property
    def _base(self) -> Budget:
        """The named budget (a time or a budget file trains at the standard budget's rates, with counts of their
        own)."""
        return BUDGETS[self.budget] if self._budget_kind() == "named" else TIMED

    @functools.cached_property
    def chosen(self) -> Budget:
        """The budget with what the run overrides of it (``--max-samples``, ``--epochs``, ``--importance-samples``);
        a time budget's scoring sized in tokens (:func:`sized_in_tokens`), at the task kind's learning rates."""
        budget = self._base
        if self._budget_kind() != "named":  # quick and standard stay as they were, for comparison
            budget = dataclasses.replace(sized_in_tokens(budget, self._example_tokens),
                                         **self._kind.compress_timed)
        copies = budget.masked_copies if self.masked_copies is None else self.masked_copies
        return dataclasses.replace(budget, max_samples=self.data.max_samples or budget.max_samples,
                                   epochs=self.epochs or budget.epochs, masked_copies=copies,
                                   importance_samples=self.importance_samples or budget.importance_samples)

    @functools.cached_property
    def _kind(self):
        from ..steps.training_common import task_kind  # torch and the task kinds: not at import

        return task_kind(self.data, self.task_settings)

    @property
    def _example_tokens(self) -> int | None:
        """The tokens every example fills, which a time budget's scoring is sized by (None: as long as its text,
        or a named budget, whose counts stay as named)."""
        return None if self._budget_kind() == "named" else self._kind.example_tokens()

    @property
    def compare_samples(self) -> int:
        """The held-out examples the candidate allocations are compared on, sized as the budget's other scoring."""
        return scored(CompressDefaults.compare_samples, self._example_tokens)

    @property
    def step_count(self) -> int:
        """How many compression stages the run takes."""
        if self.plan is not None:
            return len(self.plan.distill)
        return self.stages if self.stages is not None else default_stages(self.speedup, self.budget)

    @property
    def targets(self) -> list[float]:
        """Each stage's predicted speed-up over the original model: the same factor at every stage."""
        count = self.step_count
        return [self.speedup ** ((k + 1) / count) for k in range(count)]

    @property
    def precision(self) -> str:
        """The training's mixed precision: as asked, or with "auto" bfloat16 where this machine has it in hardware."""
        if self.mixed_precision != "auto":
            return self.mixed_precision
        return "bf16" if self.chosen.trains and fast_bf16() else "no"

    @property
    def layers_axis(self) -> bool:
        """Whether the allocation may remove whole layers (``--drop-layers``; default: where the budget trains)."""
        return self.chosen.trains if self.drop_layers is None else self.drop_layers

    def record(self) -> dict[str, Any]:
        """What decided the allocation (``allocation.json``'s ``settings``): a re-run with the same keeps it. The
        settings a one-stage run of a named budget had before stages existed are all it names then."""
        values = {"model": self.model, "teacher": self.teacher, "speedup": self.speedup,
                  "deployment": dataclasses.asdict(self.deployment), "data": data_mapping(self.data, self.task_settings),
                  "budget": dataclasses.asdict(self.chosen), "ghosts": self.ghosts, "drop_layers": self.layers_axis,
                  "prune_hidden": self.prune_hidden, "tolerance": self.tolerance, "seed": self.seed}
        extra = {"budget_given": self.budget if self._budget_kind() != "named" else None,
                 "teacher_store_gb": self.teacher_store_gb
                 if self.teacher_store_gb != TeacherStoreSettings.teacher_store_gb else None,
                 "stages": self.step_count if self.step_count > 1 else None, "unlabelled": self.unlabelled,
                 "precision": self.precision if self.precision != "no" else None}
        return values | {k: v for k, v in extra.items() if v is not None}

    @property
    def embeddings(self) -> bool:
        """Whether the task is sentence embeddings (no labelled fine-tune: its last distillation is the result)."""
        return self._kind.sentence_embedding

    @property
    def distill_weights(self) -> dict[str, float]:
        """The distillations' loss weights where the task kind's differ from distill's
        (``TaskKind.compress_distill``)."""
        return dict(self._kind.compress_distill)

    def recipe(self, steps: Sequence[Step], *, finetune: StageCounts | None = None,
               store: str | None = None) -> Recipe:
        """The validated recipe of ``steps`` (:func:`compress_recipe`) for this task kind; the same recipe asked for
        again is not built again."""
        raw = compress_recipe(self.model, steps=steps, deployment=self.deployment,
                              data=data_mapping(self.data, self.task_settings), budget=self.chosen, ghosts=self.ghosts,
                              teacher=self.teacher, seed=self.seed, finetune=finetune, embeddings=self.embeddings,
                              distill_weights=self.distill_weights,
                              store=store, store_gb=self.teacher_store_gb, unlabelled=self.unlabelled,
                              precision=self.precision)
        return _validated(yaml.safe_dump(raw, sort_keys=False))


def _precisions_kept(shared: dict[str, Any], counts: dict[str, Any]) -> dict[str, Any]:
    """The settings every training stage shares, with the precisions a stage's counts chose (a time budget timed
    them) in place of the run's."""
    return shared | {k: counts[k] for k in ("mixed_precision", "teacher_precision") if k in counts}


#: the tokens a time budget's scoring counts (importance, mask tuning, comparing the candidate allocations) are sized
#: for: examples of up to this many tokens count one each, longer ones (QA's 256-token windows) in proportion. Those
#: counts were sized on sentences; on the SQuAD part at 3x (20m, 2-core AMD EPYC) scoring 1,024 questions' windows
#: and tuning on 2,048 took 275 s of the 1,200, against 650 s of training
SCORED_TOKENS = 128


def sized_in_tokens(budget: Budget, tokens: int | None) -> Budget:
    """``budget`` with its scoring counts cut in proportion where its examples fill ``tokens`` > SCORED_TOKENS
    (None: examples as long as their text: as they are)."""
    return dataclasses.replace(budget, importance_samples=scored(budget.importance_samples, tokens),
                               tune_masks=scored(budget.tune_masks, tokens))


def scored(count: int, tokens: int | None) -> int:
    """``count`` examples of ``tokens`` each, as many as hold ``count`` examples of SCORED_TOKENS (at least 1; 0
    stays 0)."""
    if not count or tokens is None or tokens <= SCORED_TOKENS:
        return count
    return max(1, count * SCORED_TOKENS // tokens)


@functools.lru_cache(maxsize=32)
def _validated(text: str) -> Recipe:
    return validate(RecipeSource(text, "compress"), yaml.safe_load(text))


def compress_recipe(model: str, *, deployment: Deployment, data: dict[str, Any], budget: Budget, ghosts: bool,
                    teacher: str | None, seed: int, steps: Sequence[Step] | None = None, speedup: float | None = None,
                    keep_layers: Sequence[int] | None = None, hidden_width: str | None = None,
                    allocation: dict[str, Any] | None = None, finetune: StageCounts | None = None,
                    embeddings: bool = False, distill_weights: Mapping[str, float] | None = None,
                    store: str | None = None,
                    store_gb: float = TeacherStoreSettings.teacher_store_gb, unlabelled: str | None = None,
                    precision: str = "no", tune: bool = True) -> dict[str, Any]:
    """The recipe compress runs, as a mapping (``recipes/compress.yaml`` is the same with ``vars``).

    ``teacher`` None: ``model`` has no trained head for the task, so the first stage fine-tunes it. Each of
    ``steps`` is a compression stage: scores of the model so far (``importance``; the stage ``importance-2`` of the
    second, and so on), then where its structure says so a drop-layers stage keeping ``keep_layers`` and the
    smaller model scored again (``rescored``), a prune-hidden stage keeping ``hidden_width`` (prune then reading the
    scores of the model before it), prune (its ``allocation``, else the latency search for its ``target``: ``compress``
    may pick another criterion or a uniform width) and, where the budget trains, a distillation on its ``counts``
    (else the budget's). A budget without training (``none``) ends with the last pruned, tuned model; a trained
    one with the fine-tune on ``finetune``'s counts (labels and the teacher's logits; the embeddings task has no
    labels: its last distillation is the result, ``final``). ``distill_weights``: the distillations' loss weights
    where the task kind's differ from distill's (``TaskKind.compress_distill``). ``store``: the teacher store every training stage
    shares; ``unlabelled``: more text for the distillations; ``precision``: their mixed precision (and the budget's
    ``dropout`` theirs). Without ``steps``,
    one stage: ``speedup``, ``keep_layers``, ``hidden_width``, ``allocation`` and ``tune`` are its own."""
    if steps is None:  # one stage, given by its own keywords
        steps = [Step(float(speedup), Structure(None if keep_layers is None else list(keep_layers), hidden_width),
                      allocation, tune=tune)]
    train = {"max_samples": budget.max_samples, "epochs": budget.epochs}
    shared = {"mixed_precision": precision} if precision != "no" else {}
    if budget.dropout is not None:  # the student's training only: the teacher's fine-tune keeps the model's
        shared |= {"dropout": budget.dropout, "attention_dropout": budget.dropout}
    if store is not None:
        shared["teacher_store"] = store
    if store_gb != TeacherStoreSettings.teacher_store_gb:  # 0: the teacher runs at every step, no stage keeping
        shared["teacher_store_gb"] = store_gb  # a store of its own either
    graph = target(deployment.runtime).graph is not None  # a runtime of graphs: exported, and the export scored
    # the latency model first: it needs only the model's shape, and a target out of reach is then refused
    # before any training
    stages: list[dict[str, Any]] = [{"latency": {"runtime": deployment.runtime, "batch_size": deployment.batch_size,
                                                 "seq_len": deployment.seq_len, "threads": deployment.threads}}]
    if teacher is None:
        stages.append({"finetune": {"output": "teacher", **train, "learning_rate": budget.teacher_learning_rate,
                                    **({"mixed_precision": precision} if precision != "no" else {})}})
    stages.append({"eval": {"output": "teacher-eval", "model": "${teacher}"}})
    for k, step in enumerate(steps, 1):
        last = k == len(steps)


        def output(base: str, k: int = k) -> dict[str, str]:
            """The stage's name where it is not the command's own (the stages after the first)."""
            return {} if k == 1 else {"output": stage_name(base, k)}

        stages.append({"importance": {**output("importance"), "samples": budget.importance_samples}})
        keep_layers, hidden_width = step.structure
        if keep_layers is not None:
            # prune refuses scores of the model before its layers were dropped: the smaller model is scored again
            stages += [{"drop-layers": {**output("drop-layers"), "layers": ",".join(str(i) for i in keep_layers)}},
                       {"importance": {"output": stage_name(RESCORED, k), "samples": budget.importance_samples}}]
        if hidden_width is not None:
            stages.append({"prune-hidden": {**output("prune-hidden"), "hidden_width": hidden_width}})
        prune = dict(step.allocation) if step.allocation is not None else {"speedup": step.target, "latency": "${latency}"}
        if hidden_width is not None:  # the head and neuron scores of the model before its channels went
            scores = stage_name(RESCORED if keep_layers is not None else "importance", k)
            prune["importance"] = f"${{{scores}}}"
        if budget.tune_masks and step.tune:
            prune["tune_masks"] = budget.tune_masks
        stages.append({"prune": {**output("prune"), **prune}})
        if not budget.trains:
            continue
        if last:
            stages.append({"attach-ghost": {"when": ghosts}})
        counts = step.counts.to_json() if step.counts else train
        distill = {**counts, "learning_rate": budget.distill_learning_rate, **_precisions_kept(shared, counts),
                   **({"unlabelled": unlabelled} if unlabelled is not None else {}),
                   **({"masked_copies": budget.masked_copies} if budget.masked_copies else {})}
        distill |= dict(distill_weights or {})
        name = "final" if embeddings and last else stage_name("distill", k)
        stages.append({"distill": {**({"output": name} if name != "distill" else {}), **distill}})
    if budget.trains and not embeddings:
        counts = finetune.to_json() if finetune else train
        stages.append({"finetune": {"output": "final", "teacher": "${teacher}", "teacher_weight": budget.teacher_weight,
                                    **counts, "learning_rate": budget.finetune_learning_rate,
                                    **_precisions_kept(shared, counts),
                                    **({"evaluate_first": True} if budget.evaluate_first else {})}})
    stages.append({"eval": {"output": "final-eval"}})
    if embeddings:  # the sentence-transformers layout, which `--format hf` keeps
        stages.append({"export": {"output": "hf", "format": "hf"}})
    ships = target(deployment.runtime)
    exported = ships.runtime.name  # the export stage is named by its runtime: onnx, openvino
    stages += [
        {"export": {"output": exported, "format": exported, "when": graph,
                    **({"quantize": INT8} if ships.int8 else {})}},
        {"eval": {"output": "shipped-eval", "when": graph, "model": f"${{{exported}}}/{ships.graph}"}},
    ]
    how = "" if budget.trains else ", retraining-free"
    speedup = steps[-1].target
    return {"description": f"ghostify compress: {speedup:g}x faster in {deployment.describe()}{how}",
            "model": model, "teacher": teacher or "${teacher}", "data": data, "seed": seed, "stages": stages}


def data_mapping(data: DataSettings, task_settings: TaskSettings) -> dict[str, Any]:
    """The recipe's ``data:`` section: every data and task setting that differs from its default."""
    values = {f.name: getattr(data, f.name) for f in dataclasses.fields(data)
              if f.name != "max_samples" and getattr(data, f.name) != f.default}
    values |= {name: getattr(task_settings, name) for name in TASK_KEYS
               if getattr(task_settings, name) != getattr(TaskSettings(), name)}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


# ---- the recipe's stages --------------------------------------------------------------------------------------
def prefix(recipe: Recipe, last: str, *, before: bool = False) -> Recipe:
    """The recipe's stages up to and including the one named ``last`` (``before``: excluding it), in the same
    directories."""
    names = [s.name for s in recipe.stages]
    return dataclasses.replace(recipe, stages=recipe.stages[: names.index(last) + (0 if before else 1)])


def dense_model(stages: dict[str, Path], model: str) -> Path:
    """What the speed-up is measured against: the ``model`` being compressed (or the teacher fine-tuned from it)."""
    return stages.get("teacher") or Path(model)


def final_model(stages: dict[str, Path]) -> Path:
    """The compressed model: fine-tuned with the teacher (or, for embeddings, distilled), or, without training
    (``--budget none``), the last pruned one."""
    if "final" in stages:
        return stages["final"]
    return stages[max((name for name in stages if name == "prune" or name.startswith("prune-")
                       and name.removeprefix("prune-").isdigit()), key=lambda n: int(n.split("-")[1]) if "-" in n else 1)]


def shipped_model(stages: dict[str, Path], deployment: Deployment) -> Path:
    """What ships: the compressed checkpoint itself, or its graph in the target runtime."""
    ships = target(deployment.runtime)
    if ships.graph is None:
        return final_model(stages)
    return stages[ships.runtime.name] / ships.graph


def closest(attempts: list[dict[str, Any]], speedup: float) -> dict[str, Any]:
    """The attempt measured closest to ``speedup`` (on a log scale: 2x too slow is as far as 2x too fast)."""
    return min(attempts, key=lambda a: abs(math.log(a["measured"] / speedup)))


__all__ = ["CompressSettings", "MAX_STAGES", "RESCORED", "SCORED_TOKENS", "STAGED_FROM", "Step", "Structure",
           "TEACHER_STORE", "closest", "compress_recipe", "data_mapping", "default_stages", "dense_model",
           "final_model", "prefix", "scored", "shipped_model", "sized_in_tokens", "stage_name"]
