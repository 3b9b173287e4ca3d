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
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from ..architectures import get_adapter
from ..checkpoint import load_config, read_record
from ..errors import GhostifyError
from ..files import check_disjoint, output_lock, write_text_atomically
from ..flatten import flat_settings
from ..latency_model import RUNTIMES, Deployment
from ..methods import layer_origin
from ..settings import BUDGETS, BenchDefaults, Budget, CompressDefaults, DataSettings, TaskSettings
from .plan import plan
from .run import StageError, check_outputs
from .run import run as run_recipe
from .schema import TASK_KEYS, Recipe, validate
from .yaml_source import RecipeSource

REPORT_MD = "report.md"
REPORT_JSON = "report.json"
PLOT = "speedup.png"
#: the allocation compress chose and the speed-ups it measured, for a re-run to keep
ALLOCATION = "allocation.json"
#: the recipe's run directory inside OUT
STAGES = "stages"
#: the importance stage after drop-layers: scores of the model prune gets
RESCORED = "rescored"


def compress_recipe(model: str, *, speedup: float, deployment: Deployment, data: dict[str, Any], budget: Budget,
                    ghosts: bool, teacher: str | None, seed: int,
                    keep_layers: Sequence[int] | None = None, hidden_width: str | None = None,
                    allocation: dict[str, Any] | None = None, tune: bool = True) -> dict[str, Any]:
    """The recipe compress runs, as a mapping (``recipes/compress.yaml`` is the same with ``vars``).

    ``teacher`` None: ``model`` has no trained head for the task, so the first stage fine-tunes it.
    ``keep_layers``: the layers a drop-layers stage keeps before prune (:func:`_layers_to_keep`); the
    model it leaves is scored again (stage ``rescored``) for prune. ``hidden_width``: the residual stream a
    prune-hidden stage keeps before prune (:func:`_structure`), prune then reading the scores of the model
    before it. ``allocation``: the prune stage's settings
    (default: the search for ``speedup`` by the latency model; :func:`_choose` may pick another criterion or a
    uniform width). A budget without training (``none``) ends with the pruned, tuned model; ``tune`` False leaves
    the tuning out (what is timed: tuning changes weights, not shapes)."""
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
        {"eval": {"output": "shipped-eval", "when": onnx, "model": f"${{onnx}}/{_graph_name(deployment.runtime)}"}},
    ]
    how = "" if budget.trains else ", retraining-free"
    return {"description": f"ghostify compress: {speedup:g}x faster in {deployment.describe()}{how}",
            "model": model, "teacher": teacher or "${teacher}", "data": data, "seed": seed, "stages": stages}


def _graph_name(runtime: str) -> str:
    return "model_int8.onnx" if runtime == "onnx-int8" else "model.onnx"


def data_mapping(data: DataSettings, task_settings: TaskSettings) -> dict[str, Any]:
    """The recipe's ``data:`` section: every data and task setting that differs from its default."""
    values = {f.name: getattr(data, f.name) for f in dataclasses.fields(data)
              if f.name != "max_samples" and getattr(data, f.name) != f.default}
    values |= {name: getattr(task_settings, name) for name in TASK_KEYS
               if getattr(task_settings, name) != getattr(TaskSettings(), name)}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def _needs_teacher(model: str, data: DataSettings, task_settings: TaskSettings) -> bool:
    """Whether ``model`` lacks a trained head for the task (then compress fine-tunes a teacher first)."""
    from ..steps.training_common import task_kind

    return task_kind(data, task_settings).head_labels(load_config(model)) is None


def _check_data(data: DataSettings, task_settings: TaskSettings) -> None:
    """Read a few rows of both splits now: a missing dataset, column or label is one line before anything runs."""
    from ..data import load_split
    from ..steps.training_common import task_kind
    from ..tasks import dataset_for

    kind = task_kind(data, task_settings)
    if kind.can_finetune():
        raise GhostifyError(kind.can_finetune())
    dataset = dataset_for(kind.preset, data.dataset)
    for split in ("train", kind.preset.validation_split):
        load_split(dataset, kind.preset, split, max_samples=8, validation_file=data.validation_file)


def _check_reachable(model: str, deployment: Deployment, speedup: float, drop_layers: bool,
                     say: Callable[[str], None], hidden: bool = False) -> None:
    """Refuse a speed-up that even one head and one FFN neuron per layer (in one layer, where layers may be
    dropped; at the narrowest hidden size measured, where channels may be cut) would not reach, before any stage
    runs. The latency model comes from this machine's cache, or is measured into it now: the latency stage then
    reads it from there, and a refusal leaves nothing in OUT."""
    from ..steps import latency as latency_of
    from ..steps.latency_plan import structural_axes

    latency = latency_of(model, runtime=deployment.runtime, batch_size=deployment.batch_size,
                         seq_len=deployment.seq_len, threads=deployment.threads, progress=say)
    can_drop, can_cut = structural_axes(model, layers=True, hidden=True)  # what this model's structure allows
    g = latency.geometry
    layers = range(g.num_layers)
    measured = [row["hidden"] for row in latency.probes if row.get("hidden")]
    narrowest = min(measured) if hidden and can_cut and measured else None
    fastest = latency.fastest_ms([g.num_heads for _ in layers], [g.ffn_size for _ in layers],
                                 droppable=layers if drop_layers and can_drop else (), hidden=narrowest)
    best = latency.dense_ms() / fastest
    axes = [flag for flag, off in (("whole layers (--drop-layers)", can_drop and not drop_layers),
                                   ("residual channels (--prune-hidden)", can_cut and not hidden
                                    and latency.predicts_hidden)) if off]
    more = f", or let {' or '.join(axes)} go" if axes else ""
    if math.floor(best * 10) / 10 <= 1:  # "ask for 1 or less" would advise what compress refuses
        raise GhostifyError(f"--speedup {speedup:g} is out of reach on {latency.deployment.describe()}: the latency model "
                            f"predicts no speed-up from pruning heads and FFN neurons (at most {best:.2f}x; per head "
                            f"{latency.head_ms:g} ms, per neuron {latency.neuron_ms:g} ms); measure it again "
                            "(`ghostify latency MODEL --refresh`), target another deployment (--runtime, --batch-size, "
                            f"--seq-len){more}")
    if speedup > best:
        raise GhostifyError(f"--speedup {speedup:g} is out of reach on {latency.deployment.describe()}: even one head "
                            f"and one FFN neuron per layer predict {best:.2f}x; ask for {math.floor(best * 10) / 10:g} or "
                            f"less{more}")


def _check(speedup: float, deployment: Deployment, budget: str, tolerance: float) -> None:
    if isinstance(speedup, bool) or not isinstance(speedup, (int, float)) or not math.isfinite(speedup) or speedup <= 1:
        raise GhostifyError(f"--speedup {speedup!r} must be a number above 1 (e.g. 2 for twice as fast)")
    deployment.check()
    if budget not in BUDGETS:
        raise GhostifyError(f"unknown --budget {budget!r}; choose one of {', '.join(BUDGETS)}")
    if not 0 < tolerance < 1:
        raise GhostifyError(f"tolerance {tolerance!r} must be between 0 and 1")


@flat_settings
def compress(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    speedup: float,
    deployment: Deployment = Deployment(),
    data: DataSettings = DataSettings(),
    task_settings: TaskSettings = TaskSettings(),
    teacher: str | os.PathLike | None = None,
    ghosts: bool = CompressDefaults.ghosts,
    drop_layers: bool | None = CompressDefaults.drop_layers,
    prune_hidden: bool | None = None,
    budget: str = CompressDefaults.budget,
    epochs: int | None = None,
    importance_samples: int | None = None,
    tolerance: float = CompressDefaults.tolerance,
    rounds: int = CompressDefaults.rounds,
    seed: int = CompressDefaults.seed,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Compress ``model`` (with ``teacher``, or itself when it is fine-tuned for the task, as the teacher)
    to a predicted ``speedup`` in ``deployment``, check it measured, train it (unless the budget is ``none``),
    and write the report. ``drop_layers``: the allocation may also remove whole layers, ``prune_hidden``: residual
    channels (:func:`_structure`; None: where the model's interface keeps its shape and the budget trains).
    Re-running with the same ``output`` skips the stages already done.

    Example:
        >>> compress("./minilm", "out/c2", speedup=2, data=DataSettings(task="sst2", dataset="../shared/data/glue"))  # doctest: +SKIP
    """
    _check(speedup, deployment, budget, tolerance)
    data.validate()
    task_settings.validate()
    chosen = BUDGETS[budget]
    if not chosen.trains:
        _check_retraining_free(budget, ghosts, epochs, data)
    chosen = dataclasses.replace(chosen, max_samples=data.max_samples or chosen.max_samples,
                                 epochs=epochs or chosen.epochs,
                                 importance_samples=importance_samples or chosen.importance_samples)
    out = Path(output).expanduser()
    if out.exists() and not out.is_dir():
        raise GhostifyError(f"output {out} exists and is a file; choose another -o")
    model = str(model)
    say = _Said(say)  # each stage's line once, however often the runner is re-entered for a prefix of the recipe
    _check_data(data, task_settings)
    fine_tunes_teacher = teacher is None and _needs_teacher(model, data, task_settings)
    if fine_tunes_teacher and not chosen.trains:
        raise GhostifyError(f"--budget {budget} prunes a model fine-tuned for the task without training it, but "
                            f"{model} has no trained head for task {data.task}: fine-tune it first (`ghostify "
                            "finetune`) and compress that, pass --teacher, or use --budget quick")
    if teacher is None and not fine_tunes_teacher:
        teacher = model
    check_disjoint([out], [(label, str(path)) for label, path in (("model", model), ("teacher", teacher),
                                                                   ("dataset", data.dataset)) if path is not None])
    hidden_axis = _hidden_axis(prune_hidden, chosen, data, task_settings, say)
    drop_layers = chosen.trains if drop_layers is None else drop_layers  # see CompressDefaults.drop_layers
    _check_reachable(model, deployment, speedup, drop_layers, say, hidden_axis)  # before any stage runs or OUT is written
    if fine_tunes_teacher:
        say(f"{model} has no trained head for task {data.task}: a teacher is fine-tuned first")

    keep_layers: list[int] | None = None  # the layers the allocation keeps, when it drops any
    hidden_width: str | None = None  # the residual channels it keeps, when it cuts any

    def recipe_for(allocated: float, allocation: dict[str, Any] | None = None, tune: bool = True) -> Recipe:
        raw = compress_recipe(model, speedup=allocated, deployment=deployment, data=data_mapping(data, task_settings),
                              budget=chosen, ghosts=ghosts, teacher=None if teacher is None else str(teacher),
                              seed=seed, keep_layers=keep_layers, hidden_width=hidden_width, allocation=allocation,
                              tune=tune)
        return validate(RecipeSource(yaml.safe_dump(raw, sort_keys=False), "compress"), raw)

    run_dir = out / STAGES
    recipe = recipe_for(speedup)
    check_outputs(recipe, run_dir, plan(recipe, run_dir))
    # what decided the allocation; a re-run with the same settings takes the saved one, so that the
    # stages after prune (the training) are not redone after a re-allocation
    settings = {"model": model, "teacher": teacher, "speedup": speedup, "deployment": dataclasses.asdict(deployment),
                "data": data_mapping(data, task_settings), "budget": dataclasses.asdict(chosen), "ghosts": ghosts,
                "drop_layers": drop_layers, "prune_hidden": hidden_axis, "tolerance": tolerance, "seed": seed}
    # one run at a time on OUT: a second run would interleave with this one (each removing the other's
    # half-written stages); it is refused in one line instead
    with output_lock(out):
        saved = _saved_allocation(out, settings)
        dense_exports = DenseExports()
        if saved is not None:
            keep_layers, attempts, choice = saved["keep_layers"], saved["attempts"], saved.get("choice")
            hidden_width = saved.get("hidden_width")
            recipe = recipe_for(saved["allocated_for"], saved.get("prune"))
            measured = next((a for a in attempts if a.get("kept")), attempts[-1])["measured"]
            say(f"the allocation of the earlier run ({saved['allocated_for']:.2f}x predicted, measured "
                f"{measured:.2f}x) is kept: {out / ALLOCATION}")
        else:
            if drop_layers or hidden_axis:
                keep_layers, hidden_width = _structure(recipe, run_dir, speedup, drop_layers, hidden_axis, say)
                recipe = recipe_for(speedup)
            choice = _choose(recipe, run_dir, speedup, seed, say)

            def attempt(target: float, replan: bool) -> dict[str, Any]:
                """Allocate for a predicted ``target`` (``replan``: the layers and channels too) and time it,
                untuned: mask tuning changes weights, not the speed, so it runs once, on the allocation kept."""
                nonlocal keep_layers, hidden_width
                if replan:
                    keep_layers, hidden_width = _structure(recipe, run_dir, target, drop_layers, hidden_axis, say)
                    run_recipe(_prefix(recipe_for(target), "prune", before=True), run_dir, on_stage=_on_stage(say))
                allocation = _allocation(recipe_for(target), run_dir, choice, target)
                measured = _allocate_and_measure(recipe_for(target, allocation, tune=False), run_dir, deployment,
                                                 rounds, say, dense_exports, target)
                return {**measured, "structure": [keep_layers, hidden_width], "prune": allocation}

            attempts = [attempt(speedup, replan=False)]
            attempts += _corrections(attempts[0], speedup, tolerance, attempt, structural=drop_layers or hidden_axis,
                                     say=say)
            kept = min(attempts, key=lambda a: abs(math.log(a["measured"] / speedup)))  # the closest to the target
            for a in attempts:
                a["kept"] = a is kept
            (keep_layers, hidden_width), allocation, allocated = kept["structure"], kept["prune"], kept["allocated_for"]
            recipe = recipe_for(allocated, allocation)
            out.mkdir(parents=True, exist_ok=True)  # the stages made it; a caller's own runner may not have
            write_text_atomically(out / ALLOCATION, json.dumps({"settings": settings, "allocated_for": allocated,
                                                                "keep_layers": keep_layers, "hidden_width": hidden_width,
                                                                "attempts": attempts,
                                                                "choice": choice, "prune": allocation},
                                                               indent=2, default=str))
        run_recipe(recipe, run_dir, on_stage=_on_stage(say))
        stages = {p.stage.name: p.directory for p in plan(recipe, run_dir)}
        shipped = _shipped(stages, deployment)
        final = _measure(_dense(recipe, stages), shipped, deployment, rounds, shipped_is_export=deployment.runtime != "pytorch",
                         dense_exports=dense_exports)
        dense_exports.close()
        report = _report(recipe, stages, speedup, deployment, chosen, budget, attempts, final, tolerance, choice)
        _write_report(out, report)
        say(f"measured {final['measured']:.2f}x (target {speedup:g}x) in {deployment.describe()}; wrote {out / REPORT_MD}")
        return report


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


def _allocation(recipe: Recipe, run_dir: Path, choice: dict[str, Any] | None, allocated: float) -> dict[str, Any]:
    """The prune stage's settings for the allocation ``choice`` picked (:func:`_choose`), for a predicted
    ``allocated`` speed-up: the latency search by its criterion, or the uniform width for that target."""
    from ..steps.fidelity import candidate_settings

    name = (choice or {}).get("chosen", "fisher")
    stages = {p.stage.name: p for p in plan(recipe, run_dir)}
    settings = candidate_settings(name, stages["prune"].arguments["model"], stages["latency"].directory, allocated)
    if settings is None:
        raise _NoAllocation(f"no uniform width keeps a head in every layer within a predicted {allocated:.2f}x")
    if "latency" in settings:
        settings["latency"] = "${latency}"  # the run's own stage, as the recipe names it
    importance = recipe.stages[[s.name for s in recipe.stages].index("prune")].settings.get("importance")
    if importance is not None:  # the scores of the model before its channels went (compress_recipe)
        settings["importance"] = importance
    return settings


def _check_retraining_free(budget: str, ghosts: bool, epochs: int | None, data: DataSettings) -> None:
    """A budget without training takes no training settings: each is refused in one line."""
    for flag, given in (("--ghosts", ghosts), ("--epochs", epochs is not None), ("--max-samples", data.max_samples)):
        if given:
            raise GhostifyError(f"--budget {budget} trains nothing, so {flag} has nothing to set; drop {flag}, or use "
                                "--budget quick or standard")


def _choose(recipe: Recipe, run_dir: Path, speedup: float, seed: int,
            say: Callable[[str], None]) -> dict[str, Any] | None:
    """Which allocation starts closest to the teacher, before any training or tuning
    (:func:`ghostify.steps.fidelity.choose_allocation`): the latency search by the Fisher information or by the
    first-order scores, or uniform width of the same predicted latency. Compress never starts from a model further
    from its teacher than uniform pruning would give."""
    from ..steps.fidelity import choose_allocation

    run_recipe(_prefix(recipe, "prune", before=True), run_dir,
               on_stage=_on_stage(say))
    stages = {p.stage.name: p for p in plan(recipe, run_dir)}
    pruned = stages["prune"]
    teacher = stages["teacher"].directory if "teacher" in stages else Path(recipe.header.teacher)
    settings = {k: v for k, v in pruned.arguments.items()  # its own settings, the scores it reads among them
                if k not in ("model", "speedup", "latency", "output", "criterion", "rearrange", "width", "tune_masks")}
    settings.setdefault("seed", seed)
    with tempfile.TemporaryDirectory(prefix=".candidates-", dir=run_dir) as tmp:
        choice = choose_allocation(Path(pruned.arguments["model"]), teacher, stages["latency"].directory, speedup,
                                   Path(tmp), prune_settings=settings, samples=CompressDefaults.compare_samples,
                                   seed=seed + 1)
    if choice is not None:
        gaps = ", ".join(f"{name} {gap:.4g}" for name, gap in choice["gaps"].items())
        say(f"distance to the teacher on {choice['samples']} held-out training examples before training: {gaps}; "
            f"{_described(choice)} is kept")
    return choice


#: how the report names each candidate allocation
CANDIDATE_NAMES = {"fisher": "latency search by the Fisher information",
                   "fisher+rearranged": "latency search by the Fisher information, rearranged within layers",
                   "loss-gradient": "latency search by first-order scores", "uniform": "uniform width"}


def _described(choice: dict[str, Any]) -> str:
    if choice["chosen"] == "uniform":
        return f"uniform width {choice['settings']['width']}"
    return f"the {CANDIDATE_NAMES[choice['chosen']]}"


def _saved_allocation(out: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The allocation an earlier run with the same ``settings`` chose and measured (None: none, or other settings).

    The one reader of ``allocation.json``. A damaged file (not JSON, or not the shape compress writes: a hand
    edit, a disk fault) is ignored with one warning and the allocation made again, as when there is none: the
    file is compress's own record of a choice it can remake (minutes of timing, the finished stages still
    skipped), so refusing would only make the user delete it by hand."""
    path = out / ALLOCATION
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        problem: str | None = f"not readable JSON ({exc})"
    else:
        problem = _allocation_problem(saved)
    if problem is not None:
        warnings.warn(f"ignoring {path}: {problem}; the allocation is made again", stacklevel=3)
        return None
    return saved if saved["settings"] == json.loads(json.dumps(settings, default=str)) else None


def _allocation_problem(saved: Any) -> str | None:
    """What keeps ``saved`` from being an allocation compress wrote (what a re-run and its report read), or None."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0

    if not isinstance(saved, dict) or not isinstance(saved.get("settings"), dict):
        return "not a JSON object with the settings of a run"
    if not number(saved.get("allocated_for")) or saved["allocated_for"] <= 1:
        return f"allocated_for = {saved.get('allocated_for')!r}, not a speed-up above 1"
    layers = saved.get("keep_layers")
    if layers is not None and not (isinstance(layers, list) and layers
                                   and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)):
        return f"keep_layers = {layers!r}, neither null nor a list of layer indices"
    attempts = saved.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        return f"attempts = {attempts!r}, not a list of measured allocations"
    for i, attempt in enumerate(attempts):
        keys = ("allocated_for", "predicted", "measured", "rounds")
        wrong = next((k for k in keys if not isinstance(attempt, dict) or not number(attempt.get(k))), None)
        if wrong is not None:
            value = attempt.get(wrong) if isinstance(attempt, dict) else attempt
            return f"attempts[{i}].{wrong} = {value!r}, not a positive number"
        if not isinstance(attempt.get("kept", False), bool):
            return f"attempts[{i}].kept = {attempt['kept']!r}, not true or false"
        structure = attempt.get("structure")
        if structure is not None and not (isinstance(structure, list) and len(structure) == 2):
            return f"attempts[{i}].structure = {structure!r}, not [layers kept, hidden width]"
    if sum(bool(a.get("kept")) for a in attempts) > 1:
        return "more than one of the attempts is marked kept"
    hidden = saved.get("hidden_width")
    if hidden is not None:
        try:
            fraction = Fraction(str(hidden))
        except (ValueError, ZeroDivisionError):
            fraction = None
        if fraction is None or not 0 < fraction < 1:
            return f"hidden_width = {hidden!r}, neither null nor a width below 1"
    choice = saved.get("choice")
    if choice is not None and (not isinstance(choice, dict) or choice.get("chosen") not in CANDIDATE_NAMES
                               or not isinstance(choice.get("gaps"), dict)):
        return f"choice = {choice!r}, neither null nor the choice of allocation compress writes"
    prune = saved.get("prune")
    if prune is not None:
        if not isinstance(prune, dict) or not ({"width"} <= set(prune) or {"speedup", "latency"} <= set(prune)):
            return f"prune = {prune!r}, neither null nor the prune settings compress writes"
        if "width" in prune:
            try:
                width = Fraction(str(prune["width"]))
            except (ValueError, ZeroDivisionError):
                width = None
            if width is None or not 0 < width <= 1:
                return f"prune.width = {prune['width']!r}, not a width"
    return None


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


def _prefix(recipe: Recipe, last: str, *, before: bool = False) -> Recipe:
    """The recipe's stages up to and including the one named ``last`` (``before``: excluding it), in the same
    directories."""
    names = [s.name for s in recipe.stages]
    return dataclasses.replace(recipe, stages=recipe.stages[: names.index(last) + (0 if before else 1)])


def _structure(recipe: Recipe, run_dir: Path, speedup: float, layers: bool, hidden: bool,
               say: Callable[[str], None]) -> tuple[list[int] | None, str | None]:
    """Run the stages up to the importance scores, then allocate ``speedup`` with whole ``layers`` and residual
    channels (``hidden``) as candidates too (:func:`ghostify.steps.latency_plan.plan_structure`, by the
    importance stage's layer and channel scores): the layers to keep when the plan removes any (else None), and
    the hidden width to keep when it cuts channels (else None)."""
    from ..steps.latency_plan import plan_structure

    run_recipe(_prefix(recipe, "importance"), run_dir, on_stage=_on_stage(say))
    stages = {p.stage.name: p.directory for p in plan(recipe, run_dir)}
    planned = plan_structure(stages["importance"], stages["importance"], stages["latency"], speedup, layers=layers,
                             hidden=hidden)
    if planned is None:
        return None, None
    keep = planned.layers if planned.dropped else None
    if keep is not None:
        say(f"removing whole layers {','.join(map(str, planned.dropped))} costs less importance per ms saved than their "
            f"heads and neurons: drop-layers keeps {','.join(map(str, planned.layers))}, prune allocates the rest")
    of = load_config(stages["importance"]).hidden_size if planned.hidden is not None else None
    width = f"{planned.hidden}/{of}" if planned.hidden is not None and planned.hidden < of else None
    if width is not None:
        say(f"residual channels cost less importance per ms saved than the last heads and neurons: prune-hidden keeps "
            f"{planned.hidden} of {of}, prune allocates heads and neurons at that width")
    return keep, width


def _hidden_axis(asked: bool | None, budget: Budget, data: DataSettings, task_settings: TaskSettings,
                 say: Callable[[str], None]) -> bool:
    """Whether the allocation may cut residual channels: as asked, else where the model's interface keeps its
    shape (not for sentence embeddings: their output width is the hidden size) and the budget trains (a cut
    stream's norms average over fewer channels: only training recovers it, so ``none`` never cuts it)."""
    from ..steps.training_common import task_kind

    if asked is not None:
        if asked and not budget.trains:
            raise GhostifyError("--prune-hidden cuts the residual stream, whose norms then need training to recover; "
                                "--budget none trains nothing: drop --prune-hidden, or use --budget quick or standard")
        return asked
    if not budget.trains:
        return False
    if task_kind(data, task_settings).name == "embeddings":
        say("the hidden size stays: a sentence embedding is as wide as it (--prune-hidden cuts it anyway)")
        return False
    return True


def _allocate_and_measure(recipe: Recipe, run_dir: Path, deployment: Deployment, rounds: int,
                          say: Callable[[str], None], dense_exports: DenseExports | None,
                          allocated: float) -> dict[str, Any]:
    """Run the stages up to the pruned (and ghosted) model, then time it against the teacher; ``allocated``:
    the speed-up the allocation aimed at."""
    from ..steps.latency_plan import predicted_speedup

    names = [s.name for s in recipe.stages]
    last = "attach-ghost" if "attach-ghost" in names else "prune"
    run_recipe(_prefix(recipe, last), run_dir, on_stage=_on_stage(say))
    stages = {p.stage.name: p.directory for p in plan(recipe, run_dir)}
    pruned = stages[last]
    result = _measure(_dense(recipe, stages), pruned, deployment, rounds, dense_exports=dense_exports)
    result["predicted"] = predicted_speedup(stages["prune"], stages["latency"])  # at the channels it keeps
    result["allocated_for"] = allocated
    prune = recipe.stages[names.index("prune")].settings
    result["allocation"] = "uniform" if "width" in prune else str(prune.get("criterion", "fisher"))
    say(f"pruned for a predicted {result['predicted']:.2f}x: measured {result['measured']:.2f}x")
    return result


def _dense(recipe: Recipe, stages: dict[str, Path]) -> Path:
    """What the speed-up is measured against: the model being compressed (or the teacher fine-tuned from it)."""
    return stages.get("teacher") or Path(recipe.header.model)


def _final(stages: dict[str, Path]) -> Path:
    """The compressed model: fine-tuned with the teacher, or, without training (``--budget none``), pruned."""
    return stages["final"] if "final" in stages else stages["prune"]


def _shipped(stages: dict[str, Path], deployment: Deployment) -> Path:
    if deployment.runtime == "pytorch":
        return _final(stages)
    return stages["onnx"] / _graph_name(deployment.runtime)


class DenseExports:
    """The dense model in the target runtime, exported once per compress run: every check times against it."""

    def __init__(self) -> None:
        self._directory: tempfile.TemporaryDirectory | None = None
        self._graphs: dict[str, str] = {}

    def get(self, model: Path, deployment: Deployment, export: Callable[..., Any]) -> str:
        if str(model) not in self._graphs:
            if self._directory is None:
                self._directory = tempfile.TemporaryDirectory(prefix="ghostify-compress-dense-")
            target = Path(self._directory.name) / f"dense-{len(self._graphs)}"
            self._graphs[str(model)] = _in_runtime(model, target, deployment, export)
        return self._graphs[str(model)]

    def close(self) -> None:
        if self._directory is not None:
            self._directory.cleanup()


def _measure(dense: Path, compressed: Path, deployment: Deployment, rounds: int, *,
             shipped_is_export: bool = False, dense_exports: DenseExports | None = None) -> dict[str, Any]:
    """The dense and the compressed model taking turns in the target runtime: medians and spread
    (``dense_exports``: where the dense model's export is kept between checks)."""
    from ..steps import bench, export

    with tempfile.TemporaryDirectory(prefix="ghostify-compress-") as tmp:
        if dense_exports is not None:
            models = [dense_exports.get(dense, deployment, export)]
        else:
            models = [_in_runtime(dense, Path(tmp) / "dense", deployment, export)]
        models.append(compressed if shipped_is_export else _in_runtime(compressed, Path(tmp) / "compressed", deployment, export))
        rows = bench(models, batch_size=deployment.batch_size, seq_len=deployment.seq_len, threads=deployment.threads,
                     rounds=rounds, warmup=max(1, BenchDefaults.warmup))
    dense_ms, compressed_ms = rows[0]["median_ms"], rows[1]["median_ms"]
    result = {"clock": "wall", "dense_ms": dense_ms, "compressed_ms": compressed_ms, "measured": dense_ms / compressed_ms,
              # the speed-up from the quartiles: the range a busier or quieter moment of the machine gives
              "measured_low": rows[0]["p25_ms"] / rows[1]["p75_ms"],
              "measured_high": rows[0]["p75_ms"] / rows[1]["p25_ms"], "rounds": rounds,
              "wall_ms": {"dense": dense_ms, "compressed": compressed_ms},
              "cpu_ms": {"dense": rows[0]["cpu_median_ms"], "compressed": rows[1]["cpu_median_ms"]}}
    if deployment.threads == 1:
        # one thread: CPU time is the latency of a quiet machine, and other processes do not count in it
        # (as `ghostify latency` fits); the wall-clock figures stay in the report
        dense_cpu, compressed_cpu = rows[0]["cpu_median_ms"], rows[1]["cpu_median_ms"]
        result |= {"clock": "cpu", "dense_ms": dense_cpu, "compressed_ms": compressed_cpu,
                   "measured": dense_cpu / compressed_cpu}
    return result


def _in_runtime(model: Path, directory: Path, deployment: Deployment, export: Callable[..., Any]) -> str:
    """``model`` as the target runtime runs it: the checkpoint itself, or its ONNX graph."""
    if deployment.runtime == "pytorch":
        return str(model)
    export(model, directory, format="onnx", quantize="int8" if deployment.runtime == "onnx-int8" else None)
    return str(directory / _graph_name(deployment.runtime))


def _metrics(directory: Path) -> dict[str, Any]:
    path = directory / "eval.json"
    return json.loads(path.read_text()).get("metrics", {}) if path.is_file() else {}


def _report(recipe: Recipe, stages: dict[str, Path], speedup: float, deployment: Deployment, budget: Budget,
            budget_name: str, attempts: list[dict[str, Any]], final: dict[str, Any], tolerance: float,
            choice: dict[str, Any] | None) -> dict[str, Any]:
    from ..steps.info import report_size

    teacher = stages.get("teacher") or Path(recipe.header.teacher)
    model = _final(stages)
    config = load_config(model)
    record = read_record(config)
    heads, neurons = [len(h) for h in record.heads], list(record.ffn)
    adapter = get_adapter(config)  # a pruned config keeps the original sizes: the record lists what is kept
    # the layers of the original model the compressed one keeps (all of them unless layers were dropped)
    origin = layer_origin(record) or (list(range(len(heads))), len(heads))
    teacher_size, size = report_size(teacher, deployment.seq_len), report_size(model, deployment.seq_len)
    return {
        "model": recipe.header.model, "teacher": str(teacher), "task": recipe.header.data.task,
        "target_speedup": speedup, "deployment": dataclasses.asdict(deployment), "budget": budget_name,
        "budget_settings": dataclasses.asdict(budget), "tolerance": tolerance,
        "measured_speedup": final["measured"], "measured_range": [final["measured_low"], final["measured_high"]],
        "within_tolerance": abs(final["measured"] / speedup - 1) <= tolerance,
        "latency_ms": {"dense": final["dense_ms"], "compressed": final["compressed_ms"]}, "clock": final["clock"],
        "wall_ms": final["wall_ms"], "cpu_ms": final["cpu_ms"],
        "allocations": attempts, "reallocated": len(attempts) > 1,
        "teacher_metrics": _metrics(stages["teacher-eval"]), "metrics": _metrics(stages["final-eval"]),
        "shipped_metrics": _metrics(stages["shipped-eval"]) if "shipped-eval" in stages else None,
        "params": {"teacher": teacher_size["params"], "compressed": size["params"]},
        "flops": {"teacher": teacher_size["flops"], "compressed": size["flops"]},
        "heads_per_layer": heads, "neurons_per_layer": neurons, "layers": origin[0], "layers_of": origin[1],
        "heads_of": adapter.num_units(config), "neurons_of": adapter.ffn_size(config),
        "model_dir": str(model), "shipped": str(_shipped(stages, deployment)), "stages_dir": str(model.parent),
        "retraining_free": not budget.trains, "choice": choice,
    }


def _write_report(out: Path, report: dict[str, Any]) -> None:
    write_text_atomically(out / REPORT_JSON, json.dumps(report, indent=2, default=str))
    write_text_atomically(out / REPORT_MD, markdown(report))
    _plot(out / PLOT, report)


def _metric_line(metrics: dict[str, Any] | None) -> str:
    if not metrics:
        return "-"
    return ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def _kept(metrics: dict[str, Any] | None, teacher: dict[str, Any] | None) -> str:
    """`` (98.6% of the teacher)`` for the first metric both have."""
    common = [k for k in (metrics or {}) if k in (teacher or {}) and isinstance(teacher[k], (int, float)) and teacher[k]]
    return f" ({100 * metrics[common[0]] / teacher[common[0]]:.1f}% of the teacher)" if common else ""


def markdown(report: dict[str, Any]) -> str:
    d = Deployment(**report["deployment"])
    low, high = report["measured_range"]
    lines = [
        f"# ghostify compress: {report['model']}",
        "",
        f"Target **{report['target_speedup']:g}x** in {d.describe()}; measured **{report['measured_speedup']:.2f}x** "
        f"(quartile range {low:.2f}-{high:.2f}x; dense {report['latency_ms']['dense']:.2f} ms, compressed "
        f"{report['latency_ms']['compressed']:.2f} ms, medians of {report['allocations'][0]['rounds']} interleaved rounds, "
        f"{report['clock']} time)"
        + ("" if report["within_tolerance"] else f" — **misses the target by more than {report['tolerance']:.0%}**") + ".",
        "",
        "| | teacher | compressed |",
        "|---|---|---|",
        f"| validation | {_metric_line(report['teacher_metrics'])} | {_metric_line(report['metrics'])}"
        f"{_kept(report['metrics'], report['teacher_metrics'])} |",
    ]
    if report.get("shipped_metrics") is not None:
        lines.append(f"| shipped ({d.runtime}) | | {_metric_line(report['shipped_metrics'])}"
                     f"{_kept(report['shipped_metrics'], report['teacher_metrics'])} |")
    lines += [
        f"| parameters | {report['params']['teacher']:,} | {report['params']['compressed']:,} |",
        f"| FLOPs (seq {d.seq_len}) | {report['flops']['teacher']:,} | {report['flops']['compressed']:,} |",
        "",
        "Allocations (`prune --speedup`, then the dense and the pruned model timed side by side before any training):",
        "",
        "| attempt | allocation | allocated for | predicted | measured |",
        "|---|---|---|---|---|",
    ]
    for i, a in enumerate(report["allocations"], 1):
        kept = " (kept)" if a.get("kept") and len(report["allocations"]) > 1 else ""
        lines.append(f"| {i}{kept} | {a.get('allocation', 'search')} | {a['allocated_for']:.2f}x | "
                     f"{a['predicted']:.2f}x | {a['measured']:.2f}x |")
    if any(a["allocated_for"] != report["target_speedup"] for a in report["allocations"]):
        lines += ["", "The first allocation missed the target by more than the tolerance: re-allocated with the "
                      "measured correction (allocated for target x predicted / measured; with new layers or channels "
                      "where the old could not reach it, then corrected once by their own miss); the attempt "
                      "measured closest to the target is the one trained and shipped."]
    choice = report.get("choice")
    if choice:
        gaps = ", ".join(f"{CANDIDATE_NAMES.get(name, name)} {gap:.4g}" for name, gap in choice["gaps"].items())
        lines += ["", f"Which allocation: each candidate pruned to the same predicted latency, before any training or "
                      f"tuning, and compared with the teacher on {choice['samples']} held-out training examples (the "
                      f"task's distillation loss, no labels; lower is closer): {gaps}. Kept: "
                      f"**{_described(choice)}**."]
    layers = report.get("layers") or list(range(len(report["heads_per_layer"])))
    dropped = [i for i in range(report.get("layers_of", len(layers))) if i not in layers]
    gone = f" (layer{'s' if len(dropped) > 1 else ''} {','.join(map(str, dropped))} dropped whole)" if dropped else ""
    lines += ["", f"Kept per layer{gone}:", "", "| layer | heads | FFN neurons |", "|---|---|---|"]
    for i, h, n in zip(layers, report["heads_per_layer"], report["neurons_per_layer"]):
        lines.append(f"| {i} | {h} | {n} |")
    b = Budget(**report["budget_settings"])
    if not b.trains:
        search = f"the allocation above ({_described(choice)})" if choice else "the latency search"
        budget_line = (f"Budget `{report['budget']}`: retraining-free (Kwon et al. 2022), no training stage: importance "
                       f"(first-order and Fisher) on {b.importance_samples:,} training examples, {search}, and the kept "
                       f"heads' and neurons' scales tuned by least squares on {b.tune_masks:,} unlabelled training "
                       "examples where that brings each block, and the whole model, closer to the teacher.")
    else:
        tuned = f"; the pruned model tuned on {b.tune_masks:,} examples before training" if b.tune_masks else ""
        budget_line = (f"Budget `{report['budget']}`: {b.describe()} of every training stage, importance on "
                       f"{b.importance_samples:,} examples{tuned}; learning rates {b.teacher_learning_rate:g} (teacher), "
                       f"{b.distill_learning_rate:g} (distill), {b.finetune_learning_rate:g} (fine-tune with the "
                       f"teacher, weight {b.teacher_weight:g}).")
    lines += ["", budget_line,
              f"Model: `{report['model_dir']}`; shipped: `{report['shipped']}`; every stage: `{report['stages_dir']}`."]
    return "\n".join(lines) + "\n"


def _plot(path: Path, report: dict[str, Any]) -> None:
    """``speedup.png``: what each layer keeps, as a share of the original heads and neurons (the counts on the
    bars), and the measured speed-up of each check and of the shipped model against the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    heads, neurons = report["heads_per_layer"], report["neurons_per_layer"]
    layers = list(report.get("layers") or range(len(heads)))  # original indices: gaps where layers were dropped
    every = list(range(report.get("layers_of") or len(heads)))
    heads_of, neurons_of = report.get("heads_of") or max(heads), report.get("neurons_of") or max(neurons)
    for offset, kept, of, color, what in ((-0.2, heads, heads_of, "tab:blue", "heads"),
                                          (0.2, neurons, neurons_of, "tab:orange", "FFN neurons")):
        bars = left.bar([i + offset for i in layers], [100 * k / of for k in kept], width=0.4, color=color,
                        label=f"{what} (of {of:,})")
        if len(every) <= 16:  # the counts on the bars, where they fit (report.md lists them all)
            left.bar_label(bars, labels=[f"{k:,}" for k in kept], rotation=90, padding=2, fontsize=7)
    for i in sorted(set(every) - set(layers)):
        left.text(i, 2, "dropped", rotation=90, ha="center", va="bottom", fontsize=8, color="gray")
    left.axhline(100, color="gray", linestyle=":", linewidth=1)
    left.set_xticks(every)
    left.set_xlim(-0.6, len(every) - 0.4)
    left.set_ylim(0, 130)  # room for the counts above a full bar
    left.set_yticks(range(0, 101, 25))
    left.set_xlabel("layer")
    left.set_ylabel("kept, % of the original")
    left.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=8, frameon=False)

    attempts = report["allocations"]
    labels = [f"check {i}\n(predicted {a['predicted']:.2f}x)" for i, a in enumerate(attempts, 1)] + ["shipped"]
    measured = [a["measured"] for a in attempts] + [report["measured_speedup"]]
    # the range of the wall-clock quartiles, where the speed-up is of wall-clock time (one thread: of CPU time)
    ranges = [(a.get("measured_low"), a.get("measured_high")) if a.get("clock") == "wall" else (None, None)
              for a in attempts]
    ranges.append(tuple(report["measured_range"]) if report.get("clock") == "wall" and report.get("measured_range")
                  else (None, None))
    low = [m if lo is None else lo for m, (lo, _) in zip(measured, ranges)]
    high = [m if hi is None else hi for m, (_, hi) in zip(measured, ranges)]
    spread = [[max(0.0, m - lo) for m, lo in zip(measured, low)], [max(0.0, hi - m) for m, hi in zip(measured, high)]]
    colors = ["tab:gray"] * len(attempts) + ["tab:green"]
    bars = right.bar(labels, measured, color=colors, yerr=spread if any(map(any, spread)) else None, capsize=3,
                     error_kw={"elinewidth": 1, "ecolor": "black"})
    right.bar_label(bars, labels=[f"{m:.2f}x" for m in measured], label_type="center", fontsize=8, color="white")
    target = right.axhline(report["target_speedup"], color="black", linestyle="--")
    right.set_ylim(0, max([*high, report["target_speedup"]]) * 1.15)
    clock = {"wall": "\n(wall clock; whiskers: quartiles)", "cpu": "\n(CPU time, one thread)"}.get(report.get("clock"), "")
    right.set_ylabel(f"measured speed-up{clock}")
    right.tick_params(axis="x", labelsize=8)
    right.legend([target, bars[0], bars[-1]],
                 [f"target {report['target_speedup']:g}x", "pruned model", "shipped model"],
                 loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"ghostify compress: {report['target_speedup']:g}x in {Deployment(**report['deployment']).describe()}",
                 fontsize=10)
    fig.tight_layout()
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".png", delete=False) as tmp:
        fig.savefig(tmp.name, dpi=110)
    plt.close(fig)
    os.replace(tmp.name, path)


__all__ = ["BUDGETS", "Budget", "CompressDefaults", "RUNTIMES", "compress", "compress_recipe", "data_mapping", "markdown"]
