"""Every stage's settings checked before the first stage runs (``ghostify run`` and ``--dry-run``): each stage's
step makes its settings as the single command does (a method's settings dataclass refuses its values when it is
made; the other steps' ``check_arguments``), so that a value no stage can take is refused before earlier stages
have spent minutes. Beyond the values alone: ``prune``'s ``tune_masks`` against the data its scores were computed
on, where the recipe says which (an importance stage before it, or a scores file there already) and the data is
local (a dataset of the hub is read when the stage runs). What needs the stage's input model (its heads, its
positions, a latency model's shape) is checked when the stage runs, as the single command checks it."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from ..errors import GhostifyError
from ..flatten import pack
from ..methods import by_name
from ..methods.scores import SCORES_NAME, ImportanceScores
from ..steps.examples import check_tuning_data
from ..steps.importance import recorded_data
from .plan import PlannedStage
from .schema import Recipe, RecipeError

#: the method whose stages tune masks (``tune_masks``), and the stage whose output holds scores
PRUNING = "pruning"
IMPORTANCE = "importance"


def check_stages(recipe: Recipe, stages: list[PlannedStage]) -> None:
    """Refuse, one line per stage (``file:line: command: why``), every stage whose settings its step refuses."""
    problems = []
    for planned in stages:
        try:
            _check_settings(planned)
            _check_tuning(recipe, planned, stages)
        except GhostifyError as exc:
            lines = str(exc).splitlines() or [type(exc).__name__]
            problems.append(f"{recipe.source.where(planned.stage.location)}: {planned.stage.command.name}: {lines[0]}")
    if problems:
        raise RecipeError(problems)


def _check_settings(planned: PlannedStage) -> None:
    function = planned.stage.command.function
    check = getattr(function, "check_arguments", None)
    if check is not None:
        check(**pack(function, planned.arguments))


def _check_tuning(recipe: Recipe, planned: PlannedStage, stages: list[PlannedStage]) -> None:
    """``tune_masks`` against the data of the stage's scores, where the recipe says which."""
    if planned.stage.command.name != by_name(PRUNING).command or not planned.arguments.get("tune_masks"):
        return
    found = _scores_data(planned, stages)
    if found is None:
        return
    description, where = found
    model = planned.arguments.get(planned.stage.command.input)
    tokenizer = model if model and Path(str(model)).is_dir() else recipe.header.model  # every stage keeps it
    check_tuning_data(tokenizer, description, planned.arguments["tune_masks"], planned.arguments.get("seed", 0),
                      scores=where)


def _scores_data(planned: PlannedStage, stages: list[PlannedStage]) -> tuple[Any, str] | None:
    """What the stage's scores record of their data, and where they are: a scores file there already (``importance``,
    or the input's own), or the settings of the importance stage that writes them. None where the recipe does not
    say (another kind of stage writes the input): the stage checks it when it runs."""
    named = planned.arguments.get("importance") or planned.arguments.get(planned.stage.command.input)
    if named is None:
        return None
    path = Path(str(named))
    producer = next((p for p in stages if p.directory == path), None)
    if producer is not None:
        if producer.stage.command.name != IMPORTANCE:
            return None
        function = producer.stage.command.function
        defaults = {name: p.default for name, p in inspect.signature(inspect.unwrap(function)).parameters.items()
                    if p.default is not inspect.Parameter.empty}
        return recorded_data(**{**defaults, **pack(function, producer.arguments)}), str(producer.directory / SCORES_NAME)
    scores = path if path.is_file() else path / SCORES_NAME
    if not path.exists():
        return None  # a missing input is refused on its own (check_outputs)
    if not scores.is_file():
        return None, str(path)  # no scores: weight magnitude, which says nothing of data
    return ImportanceScores.load(scores).metadata.get("data"), str(scores)


__all__ = ["check_stages"]
