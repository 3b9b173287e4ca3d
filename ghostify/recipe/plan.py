"""A recipe's stages resolved for one run directory: each stage's directory, its arguments with
``${stage}`` references replaced by directories, and the earlier stages it reads. ``run`` executes
the plan and ``report`` summarises it; both import it from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import REFERENCE, Recipe, Stage


@dataclass
class PlannedStage:
    stage: Stage
    directory: Path
    arguments: dict[str, Any]  # resolved: references replaced by directories
    inputs: list[Path] = field(default_factory=list)  # earlier stages this one reads

    @property
    def label(self) -> str:
        return self.directory.name


def plan(recipe: Recipe, run_dir: str | Path) -> list[PlannedStage]:
    """Resolve references and defaults: each stage reads the previous model unless told otherwise."""
    run_dir = Path(run_dir)
    directories = {s.name: run_dir / f"{s.index + 1:02d}-{s.name}" for s in recipe.stages}
    header = recipe.header
    teacher = _resolve(header.teacher, directories, header.model, None) if header.teacher else None
    current = header.model
    planned = []
    for stage in recipe.stages:
        inputs: list[Path] = []
        arguments = {k: _resolve(v, directories, header.model, teacher, inputs) for k, v in stage.settings.items()}
        command = stage.command
        if command.input and arguments.get(command.input) is None:
            arguments[command.input] = current
            if Path(str(current)) in directories.values():
                inputs.append(Path(str(current)))
        if command.name == "distill" and arguments.get("teacher") is None:
            arguments["teacher"] = teacher
            if teacher and Path(teacher) in directories.values():
                inputs.append(Path(teacher))
        directory = directories[stage.name]
        if command.produces == "model":
            current = str(directory)
        planned.append(PlannedStage(stage, directory, arguments, inputs))
    return planned


def _resolve(value: Any, directories: dict[str, Path], model: str, teacher: str | None, inputs: list | None = None) -> Any:
    if isinstance(value, list):
        return [_resolve(v, directories, model, teacher, inputs) for v in value]
    if not isinstance(value, str):
        return value

    def replace(match) -> str:
        name = match.group(1)
        if name in directories:
            if inputs is not None:
                inputs.append(directories[name])
            return str(directories[name])
        return {"model": model, "teacher": teacher or ""}.get(name, match.group(0))

    return REFERENCE.sub(replace, value)


__all__ = ["PlannedStage", "plan"]
