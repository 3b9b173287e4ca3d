"""``ghostify run``: the stages of a recipe, in order, each into ``RUN_DIR/<nn>-<name>/``.

A stage whose directory already holds a completed run with the same resolved settings and the same
inputs is skipped; an interrupted training stage resumes from its saved state. Every stage's
parameters, FLOPs, metrics and wall time go to ``RUN_DIR/report.json`` and ``report.md``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import yaml

from ..checkpoint import _auto_class, load_config
from ..console import is_main_process
from ..errors import GhostifyError
from ..files import atomic_directory, check_disjoint, output_lock, write_text_atomically
from ..flatten import pack
from ..hub import hub_target
from ..steps import attach_ghost, prune
from ..steps.info import report_size
from ..training.loop import Deadline, partial_dir
from ..training.progress import duration
from ..training.sharding import on_main_process, start_processes
from .overrides import apply_overrides
from .plan import PlannedStage, plan
from .report import REPORT_JSON, REPORT_MD, stage_summary, write_report
from .schema import Recipe, references, validate
from .stage_checks import check_stages
from .yaml_source import RecipeSource

STAGE_FILE = "stage.json"
RECIPE_FILE = "recipe.yaml"


class StageError(GhostifyError):
    """A stage refused its input while the run was under way (the recipe itself was valid):
    exit code 1, as for any failed stage; 2 is kept for a recipe or input refused before any stage runs."""

    exit_code = 1

    def __init__(self, label: str, cause: GhostifyError):
        lines = str(cause).splitlines() or [type(cause).__name__]
        super().__init__("\n".join([f"stage {label} failed: {lines[0]}", *lines[1:]]))


def load(recipe: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    source = RecipeSource.read(recipe)
    return validate(source, apply_overrides(source.data, overrides))


def _fingerprint(planned: PlannedStage) -> dict[str, Any]:
    stamps = {}
    for path in planned.inputs:
        record = path / STAGE_FILE
        stamps[str(path)] = json.loads(record.read_text()).get("stamp") if record.is_file() else None
    return {"command": planned.stage.command.name, "arguments": _jsonable(planned.arguments), "inputs": stamps}


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def completed(planned: PlannedStage) -> dict[str, Any] | None:
    """The saved record of a stage that already ran with the same settings and inputs."""
    record = planned.directory / STAGE_FILE
    if not record.is_file():
        return None
    saved = json.loads(record.read_text())
    return saved if saved.get("fingerprint") == _fingerprint(planned) else None


def run(
    recipe: Recipe,
    run_dir: str | Path,
    *,
    on_stage: Callable[[PlannedStage, str], None] | None = None,
    deadlines: Mapping[str, Deadline] | None = None,
) -> dict[str, Any]:
    """Run (or skip) every stage; returns the report. ``deadlines``: when the training stages of these names must
    end (a time budget's last stage), whatever their settings ask; where one stopped, its ``training.json`` says."""
    run_dir = Path(run_dir)
    stages = plan(recipe, run_dir)
    check_outputs(recipe, run_dir, stages)  # before anything is written
    check_stages(recipe, stages)  # every stage's settings, before the first stage runs
    for planned in stages:  # a push's repository id and token, before hours of training (the hub: at its stage)
        if planned.arguments.get("push_to_hub"):
            hub_target(planned.arguments["push_to_hub"], revision=planned.arguments.get("revision"), reach=False)
    # one run at a time in a run directory: a second would remove the first's half-written stages as leftovers
    with output_lock(run_dir):
        return _run_stages(recipe, run_dir, stages, on_stage, deadlines or {})


def _run_stages(recipe: Recipe, run_dir: Path, stages: list[PlannedStage],
                on_stage: Callable[[PlannedStage, str], None] | None,
                deadlines: Mapping[str, Deadline]) -> dict[str, Any]:
    """The stages of :func:`run`, with its run directory locked. Under a multi-process launch
    (``accelerate launch``) every process trains and evaluates; the other stages, and every write of
    the run's own files, are the main process's while the others wait (``on_main_process``), and the main
    process decides which stages are done (each process reading the stage files itself could see one
    the main process has just written, and skip a stage the others run)."""
    start_processes()
    main = is_main_process()

    def prepare() -> None:
        _remove_leftovers(run_dir, stages)
        (run_dir / RECIPE_FILE).write_text(yaml.safe_dump(recipe.raw, sort_keys=False))

    on_main_process(prepare)
    rows: list[dict[str, Any]] = []
    for planned in stages:
        saved = on_main_process(lambda: completed(planned))
        if saved is not None:
            if on_stage:
                on_stage(planned, "skipped")
            rows.append({**saved["summary"], "status": "skipped"})
            continue
        if on_stage:
            on_stage(planned, "running")
        started = time.perf_counter()
        try:
            deadline = deadlines.get(planned.stage.name)
            if _every_process(planned):
                _execute(planned, deadline)
            else:
                on_main_process(lambda: _execute(planned, deadline))
        except StageError:
            raise
        except GhostifyError as exc:
            raise StageError(planned.label, exc) from exc
        wall = time.perf_counter() - started
        if on_stage:
            on_stage(planned, f"done in {duration(wall)}")

        def record_stage() -> None:  # once the main process has written the stage's outputs
            summary = stage_summary(planned, wall)
            record = {"stamp": uuid.uuid4().hex, "fingerprint": _fingerprint(planned), "summary": summary}
            write_text_atomically(planned.directory / STAGE_FILE, json.dumps(record, indent=2))
            rows.append({**summary, "status": "ran"})
            write_report(run_dir, recipe, rows)

        on_main_process(record_stage)
    final = next((p for p in reversed(stages) if p.stage.command.produces == "model"), None)
    if final is not None and main:
        # the final checkpoint reproduces itself: `ghostify run OUT/recipe.yaml -o NEW_RUN`
        write_text_atomically(final.directory / RECIPE_FILE, yaml.safe_dump(recipe.raw, sort_keys=False))
    return write_report(run_dir, recipe, rows) if main else {}


def _every_process(planned: PlannedStage) -> bool:
    """Training and evaluation run on every process of a launch (each its share of the data); the
    other stages hold one copy of a model and write files: the main process runs them."""
    command = planned.stage.command
    return command.trains or command.produces == "metrics"


def outputs_line(recipe: Recipe, run_dir: str | Path) -> str:
    """The last line of ``ghostify run``: where the report and the final model are."""
    run_dir = Path(run_dir)
    final = next((p for p in reversed(plan(recipe, run_dir)) if p.stage.command.produces == "model"), None)
    model = f"; final model {final.directory}" if final is not None else ""
    return f"wrote {run_dir} ({REPORT_MD}, {REPORT_JSON}, one directory per stage{model})"


def _remove_leftovers(run_dir: Path, stages: list[PlannedStage]) -> None:
    """Remove the hidden directories a killed run left beside its stages: a half-written output
    (``.NN-x.tmp-*``), a replaced one (``.NN-x.old-*``), a finished work directory
    (``.NN-x.partial.old-*``). Their stages were not recorded as done, so they run again."""
    prefixes = tuple(f".{p.directory.name}.{kind}" for p in stages for kind in ("tmp-", "old-", "partial.old-"))
    for entry in run_dir.iterdir():
        if entry.name.startswith(prefixes) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


#: stage settings that name something a stage reads
PATH_KEYS = ("model", "student", "teacher", "dataset", "mlm", "label_with", "importance", "latency")


def external_inputs(recipe: Recipe) -> list[tuple[str, str]]:
    """Every path the recipe reads that no stage of it produces: the recipe file, the model, the
    teacher, datasets, scores... (values with a ``${stage}`` reference are the run's own)."""
    header = recipe.header
    found: list[tuple[str, str]] = [("recipe", str(recipe.source.filename)), ("model", str(header.model))]
    if header.teacher and not references(header.teacher):
        found.append(("teacher", header.teacher))
    for stage in recipe.stages:
        for key in PATH_KEYS:
            value = stage.settings.get(key)
            if isinstance(value, str) and value and not references(value):
                found.append((f"{stage.name}.{key}", value))
    return found


def check_outputs(recipe: Recipe, run_dir: Path, stages: list[PlannedStage]) -> None:
    """Refuse a run whose directory or any stage directory (or its OUT.partial) is, contains or
    lies inside a path the recipe reads: running it would overwrite or delete that input."""
    if run_dir.exists() and not run_dir.is_dir():
        raise GhostifyError(f"run directory {run_dir} exists and is a file; choose another -o")
    outputs = [run_dir]
    for planned in stages:
        outputs.append(planned.directory)
        if planned.stage.command.trains:
            outputs.append(partial_dir(planned.directory))
    inputs = external_inputs(recipe)
    check_disjoint(outputs, inputs)
    for label, value in inputs:  # a missing model or teacher fails now, not after writing the run directory
        if label in ("model", "teacher"):
            load_config(value)


def _execute(planned: PlannedStage, deadline: Deadline | None = None) -> None:
    """Run one stage: its flat settings (``learning_rate: ...``) become the step's settings
    dataclasses (``training=TrainSettings(...)``); a training stage's ``deadline`` goes to its loop."""
    command = planned.stage.command
    kwargs = dict(planned.arguments)
    if command.produces == "metrics":
        result = command.function(**pack(command.function, kwargs))
        if is_main_process():  # every process of a launch evaluated its share; one writes the result
            with atomic_directory(planned.directory, overwrite=True) as tmp:
                (tmp / "eval.json").write_text(json.dumps(result, indent=2))
        return
    if command.trains:
        kwargs["resume"] = True  # continue an interrupted stage from OUT.partial
        if deadline is not None:
            kwargs["deadline"] = deadline
    command.function(**pack(command.function, {**kwargs, "output": planned.directory, "overwrite": True}))


def dry_run(recipe: Recipe, run_dir: str | Path) -> list[dict[str, Any]]:
    """The plan, with parameters and FLOPs after every structural stage, measured on a randomly
    initialised copy of the recipe's model (no weights are downloaded or trained)."""
    stages = plan(recipe, run_dir)
    check_outputs(recipe, Path(run_dir), stages)  # the real run would refuse these
    check_stages(recipe, stages)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        current = _random_copy(load_config(recipe.header.model), Path(tmp) / "model")
        size = report_size(current)
        rows.append({"stage": "model", "command": "", "params": size["params"], "flops": size["flops"],
                     "arguments": {"model": recipe.header.model}})
        for k, planned in enumerate(stages):
            command = planned.stage.command.name
            kwargs = {key: value for key, value in planned.arguments.items() if key != planned.stage.command.input}
            if command == "prune" and kwargs.get("speedup") is not None:
                # its widths come from a latency model measured when the run gets there: sizes unknown from here on
                size = {"params": None, "flops": None}
            elif size["params"] is None:
                pass
            elif command in ("prune", "attach-ghost"):
                target = Path(tmp) / f"{k}"
                function = prune if command == "prune" else attach_ghost
                # by weight magnitude, untuned: the sizes depend on the widths alone (no scores, no data here)
                function(current, target, **{key: v for key, v in kwargs.items() if key not in ("importance", "tune_masks")})
                current = target
                size = report_size(current)
            rows.append({"stage": planned.label, "command": command, "params": size["params"], "flops": size["flops"],
                         "arguments": _jsonable(planned.arguments)})
    return rows


def _random_copy(config, directory: Path) -> Path:
    cls = _auto_class(config, None)
    build = getattr(cls, "from_config", None) or cls._from_config
    build(config).save_pretrained(str(directory))
    return directory


def describe(planned: list[PlannedStage]) -> list[str]:
    return [f"{p.label}: {p.stage.command.name} " + ", ".join(f"{k}={v}" for k, v in p.arguments.items()) for p in planned]


__all__ = ["PlannedStage", "StageError", "completed", "describe", "dry_run", "load", "outputs_line", "plan", "run"]
