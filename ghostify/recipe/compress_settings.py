"""What one ``compress`` run is asked for, checked when it is made (:class:`CompressSettings`), and the recipe it
runs (:func:`compress_recipe`: the stages of ``recipes/compress.yaml``) with the names of its stages."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from ..errors import GhostifyError
from ..latency_model import Deployment
from ..settings import BUDGETS, Budget, CompressDefaults, DataSettings, TaskSettings, checked_speedup
from .compress_timing import graph_name
from .schema import TASK_KEYS, Recipe, validate
from .yaml_source import RecipeSource

#: the importance stage after drop-layers: scores of the model prune gets
RESCORED = "rescored"


class Structure(NamedTuple):
    """What the allocation removes besides heads and neurons: the layers it keeps (None: all) and the residual
    stream's width it keeps ("192/384"; None: all of it)."""

    keep_layers: list[int] | None = None
    hidden_width: str | None = None


@dataclass(frozen=True)
class CompressSettings:
    """One ``compress`` run's settings (what ``compress`` takes besides the model's output directory), each refused
    in one line when it is made, before anything is read; what the run derives from them is an attribute."""

    model: str
    speedup: float
    deployment: Deployment = Deployment()
    data: DataSettings = DataSettings()
    task_settings: TaskSettings = TaskSettings()
    #: None: the model itself when it has a trained head for the task, else one is fine-tuned from it
    teacher: str | None = None
    ghosts: bool = CompressDefaults.ghosts
    #: None: where the budget trains (:attr:`layers_axis`)
    drop_layers: bool | None = CompressDefaults.drop_layers
    #: None: decided by the run from the budget and the task (``compress._hidden_axis``)
    prune_hidden: bool | None = None
    budget: str = CompressDefaults.budget
    epochs: int | None = None
    importance_samples: int | None = None
    tolerance: float = CompressDefaults.tolerance
    rounds: int = CompressDefaults.rounds
    seed: int = CompressDefaults.seed

    def __post_init__(self) -> None:
        checked_speedup(self.speedup)
        self.deployment.check()
        if self.budget not in BUDGETS:
            raise GhostifyError(f"unknown --budget {self.budget!r}; choose one of {', '.join(BUDGETS)}")
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, (int, float)) \
                or not 0 < self.tolerance < 1:
            raise GhostifyError(f"tolerance {self.tolerance!r} must be between 0 and 1")
        self.data.validate()
        self.task_settings.validate()
        if not BUDGETS[self.budget].trains:  # a budget without training takes no training settings
            for flag, given in (("--ghosts", self.ghosts), ("--epochs", self.epochs is not None),
                                ("--max-samples", self.data.max_samples)):
                if given:
                    raise GhostifyError(f"--budget {self.budget} trains nothing, so {flag} has nothing to set; drop "
                                        f"{flag}, or use --budget quick or standard")
            if self.prune_hidden:
                raise GhostifyError("--prune-hidden cuts the residual stream, whose norms then need training to "
                                    f"recover; --budget {self.budget} trains nothing: drop --prune-hidden, or use "
                                    "--budget quick or standard")

    @functools.cached_property
    def chosen(self) -> Budget:
        """The budget with what the run overrides of it (``--max-samples``, ``--epochs``, ``--importance-samples``)."""
        budget = BUDGETS[self.budget]
        return dataclasses.replace(budget, max_samples=self.data.max_samples or budget.max_samples,
                                   epochs=self.epochs or budget.epochs,
                                   importance_samples=self.importance_samples or budget.importance_samples)

    @property
    def layers_axis(self) -> bool:
        """Whether the allocation may remove whole layers (``--drop-layers``; default: where the budget trains)."""
        return self.chosen.trains if self.drop_layers is None else self.drop_layers

    def record(self) -> dict[str, Any]:
        """What decided the allocation (``allocation.json``'s ``settings``): a re-run with the same keeps it."""
        return {"model": self.model, "teacher": self.teacher, "speedup": self.speedup,
                "deployment": dataclasses.asdict(self.deployment), "data": data_mapping(self.data, self.task_settings),
                "budget": dataclasses.asdict(self.chosen), "ghosts": self.ghosts, "drop_layers": self.layers_axis,
                "prune_hidden": self.prune_hidden, "tolerance": self.tolerance, "seed": self.seed}

    def recipe(self, allocated: float, structure: Structure = Structure(), allocation: dict[str, Any] | None = None,
               *, tune: bool = True) -> Recipe:
        """The validated recipe for a predicted ``allocated`` speed-up (:func:`compress_recipe`); the same recipe
        asked for again is not built again."""
        raw = compress_recipe(self.model, speedup=allocated, deployment=self.deployment,
                              data=data_mapping(self.data, self.task_settings), budget=self.chosen, ghosts=self.ghosts,
                              teacher=self.teacher, seed=self.seed, keep_layers=structure.keep_layers,
                              hidden_width=structure.hidden_width, allocation=allocation, tune=tune)
        return _validated(yaml.safe_dump(raw, sort_keys=False))


@functools.lru_cache(maxsize=32)
def _validated(text: str) -> Recipe:
    return validate(RecipeSource(text, "compress"), yaml.safe_load(text))


def compress_recipe(model: str, *, speedup: float, deployment: Deployment, data: dict[str, Any], budget: Budget,
                    ghosts: bool, teacher: str | None, seed: int,
                    keep_layers: Sequence[int] | None = None, hidden_width: str | None = None,
                    allocation: dict[str, Any] | None = None, tune: bool = True) -> dict[str, Any]:
    """The recipe compress runs, as a mapping (``recipes/compress.yaml`` is the same with ``vars``).

    ``teacher`` None: ``model`` has no trained head for the task, so the first stage fine-tunes it.
    ``keep_layers``: the layers a drop-layers stage keeps before prune (``compress._structure``); the
    model it leaves is scored again (stage ``rescored``) for prune. ``hidden_width``: the residual stream a
    prune-hidden stage keeps before prune, prune then reading the scores of the model before it. ``allocation``:
    the prune stage's settings (default: the search for ``speedup`` by the latency model; ``compress._choose`` may
    pick another criterion or a uniform width). A budget without training (``none``) ends with the pruned, tuned
    model; ``tune`` False leaves the tuning out (what is timed and compared: tuning changes weights, not shapes)."""
    train = {"max_samples": budget.max_samples, "epochs": budget.epochs}
    onnx = deployment.runtime != "pytorch"
    # the latency model first: it needs only the model's shape, and a target out of reach is then refused
    # before any training
    stages: list[dict[str, Any]] = [{"latency": {"runtime": deployment.runtime, "batch_size": deployment.batch_size,
                                                 "seq_len": deployment.seq_len, "threads": deployment.threads}}]
    if teacher is None:
        stages.append({"finetune": {"output": "teacher", **train, "learning_rate": budget.teacher_learning_rate}})
    stages += [
        {"eval": {"output": "teacher-eval", "model": "${teacher}"}},
        {"importance": {"samples": budget.importance_samples}},
    ]
    if keep_layers is not None:
        # prune refuses scores of the model before its layers were dropped: the smaller model is scored again
        stages += [{"drop-layers": {"layers": ",".join(str(i) for i in keep_layers)}},
                   {"importance": {"output": RESCORED, "samples": budget.importance_samples}}]
    if hidden_width is not None:
        stages.append({"prune-hidden": {"hidden_width": hidden_width}})
    prune = dict(allocation) if allocation is not None else {"speedup": speedup, "latency": "${latency}"}
    if hidden_width is not None:  # the head and neuron scores of the model before its channels went (their counts hold)
        prune["importance"] = "${rescored}" if keep_layers is not None else "${importance}"
    if budget.tune_masks and tune:
        prune["tune_masks"] = budget.tune_masks
    stages.append({"prune": prune})
    if budget.trains:
        stages += [
            {"attach-ghost": {"when": ghosts}},
            {"distill": {**train, "learning_rate": budget.distill_learning_rate}},
            {"finetune": {"output": "final", "teacher": "${teacher}", "teacher_weight": budget.teacher_weight, **train,
                          "learning_rate": budget.finetune_learning_rate}},
        ]
    stages += [
        {"eval": {"output": "final-eval"}},
        {"export": {"output": "onnx", "format": "onnx", "when": onnx,
                    **({"quantize": "int8"} if deployment.runtime == "onnx-int8" else {})}},
        {"eval": {"output": "shipped-eval", "when": onnx, "model": f"${{onnx}}/{graph_name(deployment.runtime)}"}},
    ]
    how = "" if budget.trains else ", retraining-free"
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
    """The compressed model: fine-tuned with the teacher, or, without training (``--budget none``), pruned."""
    return stages["final"] if "final" in stages else stages["prune"]


def shipped_model(stages: dict[str, Path], deployment: Deployment) -> Path:
    """What ships: the compressed checkpoint itself, or its ONNX graph."""
    if deployment.runtime == "pytorch":
        return final_model(stages)
    return stages["onnx"] / graph_name(deployment.runtime)


def closest(attempts: list[dict[str, Any]], speedup: float) -> dict[str, Any]:
    """The attempt measured closest to ``speedup`` (on a log scale: 2x too slow is as far as 2x too fast)."""
    return min(attempts, key=lambda a: abs(math.log(a["measured"] / speedup)))


__all__ = ["CompressSettings", "RESCORED", "Structure", "closest", "compress_recipe", "data_mapping", "dense_model",
           "final_model", "prefix", "shipped_model"]
