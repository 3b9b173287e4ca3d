"""Recipe schema: validated as a whole before any model is loaded (pydantic, ``extra="forbid"``); each stage's
settings are then made as its step makes them before the first stage runs (``stage_checks.py``).

A recipe names a ``model``, an optional ``teacher``, shared ``data`` settings, ``vars`` (values that
``${name}`` substitutes anywhere) and an ordered list of ``stages``. Each stage is one command with
exactly the keys of that command's options, plus ``output`` (the stage's name, used for its directory
and for ``${name}`` references by later stages), ``seed``, and ``when`` (``false``: the stage is left
out, e.g. ``when: ${ghosts}`` with ``--set vars.ghosts=true`` to turn it on; the other stages keep
their numbers). The keys are generated from the step
functions' signatures, a settings dataclass (``data: DataSettings``) contributing its fields as flat
keys (``max_length``), so a recipe names every option as the CLI flag does.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .. import steps
from ..errors import GhostifyError
from ..flatten import EMPTY, flat_parameters
from ..methods import applied_names, methods, order_problem, stage_methods
from ..record import GhostifyRecord
from ..settings import DataSettings, TaskSettings
from .yaml_source import MAX_BYTES, MAX_VALUES, Location, RecipeSource

REFERENCE = re.compile(r"\$\{([A-Za-z0-9_.\-]+)\}")
#: step-function parameters a recipe does not set (the runner does; a hub token is a secret, never in a
#: recipe, which a run copies beside its outputs: push_to_hub reads HF_TOKEN or the saved login)
INTERNAL = {"output", "overwrite", "resume", "progress", "on_step", "deadline", "token"}
#: settings of ``data:`` that every stage accepting them inherits (not ``max_samples``: stages subsample
#: differently, e.g. augment a few examples and distill on all of their versions)
DATA_KEYS = ("dataset", "task", "text_columns", "label_column", "metric", "max_length")
#: and every field of :class:`ghostify.settings.TaskSettings` (columns, windows, sub-word labels)
TASK_KEYS = tuple(f.name for f in dataclasses.fields(TaskSettings))


@dataclass(frozen=True)
class Command:
    name: str  # the YAML key and CLI command
    function: Callable[..., Any]
    input: str | None  # the parameter that takes the current model, if any
    produces: str  # "model", "dataset", "metrics" or "export" (files for other runtimes)
    trains: bool = False  # runs the training loop (so it can resume)


def commands() -> dict[str, Command]:
    """Every stage a recipe may name, in order: the commands, and one per registered method that a command of
    its own applies (prune, attach-ghost, drop-layers, ...; a plug-in registered after this module was
    imported too, hence read from the registry at each call)."""
    return {
        "importance": Command("importance", steps.importance, "model", "model"),
        **{name: Command(name, step, "model", "model") for name, step in steps.method_steps().items()},
        "augment": Command("augment", steps.augment, None, "dataset"),
        "distill": Command("distill", steps.distill, "student", "model", trains=True),
        "finetune": Command("finetune", steps.finetune, "model", "model", trains=True),
        "eval": Command("eval", steps.evaluate, "model", "metrics"),
        "export": Command("export", steps.export, "model", "export"),
        "latency": Command("latency", steps.latency, "model", "export"),  # latency.json: what `prune --speedup` reads
    }


class RecipeError(GhostifyError):
    """All the problems of a recipe, one per line, each with ``file:line``."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def _data_model() -> type[BaseModel]:
    """``data:``: the ``DATA_KEYS`` fields of :class:`ghostify.settings.DataSettings` and the fields of
    :class:`ghostify.settings.TaskSettings`, each optional."""
    hints = {**typing.get_type_hints(TaskSettings), **typing.get_type_hints(DataSettings)}
    fields: dict[str, Any] = {name: (Optional[_as_list(hints[name])], None) for name in (*DATA_KEYS, *TASK_KEYS)}
    return create_model("DataHeader", __config__=ConfigDict(extra="forbid"), **fields)


def _as_list(annotation: Any) -> Any:
    """``tuple[X, ...]`` (or optional) as ``list[X]``: what YAML gives and later stages substitute into."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.Union[tuple(_as_list(a) for a in typing.get_args(annotation))]
    if typing.get_origin(annotation) is tuple:
        return list[typing.get_args(annotation)[0]]
    return annotation


DataHeader = _data_model()


class RecipeHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: Optional[str] = None
    model: str
    teacher: Optional[str] = None
    data: DataHeader = Field(default_factory=DataHeader)
    vars: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    stages: list[Any] = Field(min_length=1)


def _plain_type(annotation: Any) -> Any:
    """Step annotations, with path-like arguments as strings (YAML has no paths)."""
    if annotation is os.PathLike or annotation is typing.Any:
        return str if annotation is os.PathLike else Any
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = tuple(dict.fromkeys(_plain_type(a) for a in typing.get_args(annotation)))
        return typing.Union[args] if len(args) > 1 else args[0]
    return annotation


def _stage_model(command: Command) -> type[BaseModel]:
    fields: dict[str, Any] = {"output": (Optional[str], None), "seed": (Optional[int], None), "when": (bool, True)}
    for parameter in flat_parameters(command.function):
        name = parameter.name
        if name in INTERNAL or name in fields:
            continue
        annotation = _plain_type(parameter.annotation)
        required = parameter.default is EMPTY and name != command.input and name != "teacher"
        default = ... if required else (None if parameter.default is EMPTY else parameter.default)
        if not required and default is None:
            annotation = Optional[annotation]
        fields[name] = (annotation, default)
    return create_model(f"{command.name.title().replace('-', '')}Stage", __config__=ConfigDict(extra="forbid"), **fields)


_STAGE_MODELS: dict[tuple[str, Callable[..., Any]], type[BaseModel]] = {}


def stage_model(command: str) -> type[BaseModel]:
    """The pydantic model of a stage's settings (built once per command and function)."""
    found = commands()[command]
    key = (command, found.function)
    if key not in _STAGE_MODELS:
        _STAGE_MODELS[key] = _stage_model(found)
    return _STAGE_MODELS[key]


def stage_keys(command: str) -> list[str]:
    return list(stage_model(command).model_fields)


def accepts(command: str, key: str) -> bool:
    """Whether the command's function takes ``key`` (every stage may say ``seed``; only commands
    with randomness use it)."""
    return key not in INTERNAL and any(p.name == key for p in flat_parameters(commands()[command].function))


def __getattr__(name: str) -> Any:
    """``COMMANDS`` and ``STAGE_MODELS`` as they are now (the registry may have grown since import)."""
    if name == "COMMANDS":
        return commands()
    if name == "STAGE_MODELS":
        return {command: stage_model(command) for command in commands()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Stage:
    index: int
    command: Command
    name: str  # ``output`` or the command name
    settings: dict[str, Any]  # validated, only the keys the recipe set (data defaults applied)
    location: Location


@dataclass
class Recipe:
    source: RecipeSource
    header: RecipeHeader
    stages: list[Stage]
    raw: dict[str, Any]  # the document after --set and ${vars}: what reproduces the run
    left_out: list[str] = field(default_factory=list)  # `when: false` stages, as their directories would be named


def _suggest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: the most keys a message lists; where there are more, it names where they are listed
LISTED_KEYS = 10


def _unknown_key(key: str, options: list[str], command: str | None) -> str:
    """What follows "unknown key": the key meant, when one is close; else the keys, or where they are listed
    (a stage's are its command's options)."""
    close = _suggest(key, options)
    if close:
        return close
    if len(options) <= LISTED_KEYS:
        return f"; the keys here are {', '.join(options)}"
    listed = f"`ghostify {command} --help`" if command else "`ghostify finetune --help` (its data and task options)"
    return f"; the keys here are the options of {listed}, with _ for -"


def _pydantic_problems(exc: ValidationError, source: RecipeSource, prefix: Location, model: type[BaseModel],
                       command: str | None = None) -> list[str]:
    problems = []
    for error in exc.errors():
        location = (*prefix, *error["loc"])
        key = str(error["loc"][-1]) if error["loc"] else ""
        where = source.where(location)
        if error["type"] == "extra_forbidden":
            options = _keys_at(model, error["loc"][:-1])
            problems.append(f"{where}: unknown key {key!r}{_unknown_key(key, options, command)}")
        elif error["type"] == "missing":
            problems.append(f"{where}: missing required key {key!r}; add it")
        else:
            value = error.get("input")
            problems.append(f"{where}: {'.'.join(map(str, error['loc']))} = {value!r}: {error['msg'].lower()}; fix the value")
    return problems


def _keys_at(model: type[BaseModel], path: tuple) -> list[str]:
    """The allowed keys of the (nested) model at ``path``."""
    for part in path:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            break
    return list(model.model_fields)


def substitute_vars(value: Any, variables: dict[str, Any], limit: int = MAX_BYTES) -> Any:
    """Replace ``${name}`` for names in ``vars`` (a whole-string reference keeps the value's type).

    ``vars`` expand like aliases: a ``ValueError`` once references inside strings have added more
    than ``limit`` characters in all (a large variable written many times into strings)."""
    added = 0

    def text(match: re.Match) -> str:
        nonlocal added
        name = match.group(1)
        if name not in variables:
            return match.group(0)
        replacement = str(variables[name])
        added += len(replacement)
        if added > limit:
            raise ValueError(f"${{vars}} inside strings add more than {limit:,} characters")
        return replacement

    def substitute(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: substitute(v) for k, v in item.items()}
        if isinstance(item, list):
            return [substitute(v) for v in item]
        if isinstance(item, str):
            whole = REFERENCE.fullmatch(item)
            if whole and whole.group(1) in variables:
                return variables[whole.group(1)]
            return REFERENCE.sub(text, item)
        return item

    return substitute(value)


def _count_values(value: Any, limit: int) -> int:
    """The values in ``value`` (mapping keys included, as the YAML limits count), stopping past ``limit``."""
    count, stack = 0, [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            count += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def references(value: Any) -> list[str]:
    if isinstance(value, str):
        return REFERENCE.findall(value)
    if isinstance(value, dict):
        return [r for v in value.values() for r in references(v)]
    if isinstance(value, list):
        return [r for v in value for r in references(v)]
    return []


def validate(source: RecipeSource, raw: dict[str, Any]) -> Recipe:
    """Check the whole recipe and report every problem at once (``RecipeError``)."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise RecipeError([f"{source.filename}:1: a recipe is a mapping with model, data and stages; see recipes/quickstart.yaml"])
    variables = raw.get("vars") or {}
    if not isinstance(variables, dict):
        variables = {}
    try:  # vars are aliases too: a large one used in many places
        raw = substitute_vars(raw, variables)
    except ValueError as exc:
        raise RecipeError([f"{source.filename}: {exc}; use large variables in fewer places"]) from None
    if _count_values(raw, MAX_VALUES) > MAX_VALUES:
        raise RecipeError([f"{source.filename}: the recipe has more than {MAX_VALUES:,} values once its ${{vars}} are "
                           "substituted; use large variables in fewer places"])
    try:
        header = RecipeHeader.model_validate(raw)
    except ValidationError as exc:
        problems += _pydantic_problems(exc, source, (), RecipeHeader)
        header = None
    stages: list[Stage] = []
    left_out: list[str] = []
    names: dict[str, int] = {}
    data = header.data.model_dump(exclude_none=True) if header else (raw.get("data") if isinstance(raw.get("data"), dict) else {})
    for i, entry in enumerate(raw.get("stages") or [] if isinstance(raw.get("stages"), list) else []):
        location: Location = ("stages", i)
        if not (isinstance(entry, dict) and len(entry) == 1):
            problems.append(f"{source.where(location)}: a stage is one command with its settings, e.g. `- prune: {{width: 0.5}}`")
            continue
        (command_name, body), = entry.items()
        known = commands()
        if command_name not in known:
            problems.append(f"{source.where(location)}: unknown stage {command_name!r}"
                            f"{_suggest(str(command_name), list(known)) or '; stages are ' + ', '.join(known)}")
            continue
        body = body or {}
        if not isinstance(body, dict):
            problems.append(f"{source.where((*location, command_name))}: the settings of {command_name} must be a mapping")
            continue
        model = stage_model(command_name)
        try:
            values = model.model_validate(body).model_dump(warnings=False)  # a tuple setting may default to its text ("o,ffn2")
        except ValidationError as exc:
            problems += _pydantic_problems(exc, source, (*location, command_name), model, command_name)
            values = body  # keep checking the order and references of the rest
        if values.get("when") is False:  # left out: nothing refers to it, and the other stages keep their numbers
            left_out.append(f"{i + 1:02d}-{body.get('output') or command_name}")
            continue
        settings = {k: v for k, v in values.items() if k in body and (k == "output" or accepts(command_name, k))}
        for key, value in data.items():
            if key not in settings and accepts(command_name, key):
                settings[key] = value
        if "seed" not in settings and header is not None and accepts(command_name, "seed"):
            settings["seed"] = header.seed
        name = settings.pop("output", None) or command_name
        if name in names:
            problems.append(
                f"{source.where((*location, command_name))}: stage name {name!r} is used twice (also stage {names[name] + 1}); "
                "give one of them another `output:`"
            )
        names[name] = i
        stages.append(Stage(i, known[command_name], name, settings, (*location, command_name)))
    problems += _check_order(source, header or _partial_header(raw), stages)
    if problems:
        raise RecipeError(problems)
    return Recipe(source=source, header=header, stages=stages, raw=raw, left_out=left_out)


def _partial_header(raw: dict[str, Any]) -> RecipeHeader:
    """The header's fields that are usable, so order checks still run after other errors."""
    teacher = raw.get("teacher")
    return RecipeHeader.model_construct(model=str(raw.get("model", "")), teacher=teacher if isinstance(teacher, str) else None)


def _methods_of_model(model: str | None) -> dict[str, str]:
    """The structural methods a local input model already has (from its config.json's record)."""
    config = Path(str(model or "")) / "config.json"
    try:
        record = json.loads(config.read_text()).get("ghostify") if config.is_file() else None
    except (OSError, ValueError):
        return {}  # an unreadable config is reported when the stage loads it
    if not isinstance(record, dict):
        return {}
    try:
        present = GhostifyRecord.from_dict(record, str(config))
    except GhostifyError:
        return {}  # reported when the stage loads it
    return {name: f"the model {model}" for name in applied_names(present)}


def _check_order(source: RecipeSource, header: RecipeHeader, stages: list[Stage]) -> list[str]:
    """References point backwards; a teacher exists before distill; tasks are known; the structural
    methods come in an order they allow (``Method.before``), starting from the recipe's model."""
    problems = []
    applied = _methods_of_model(header.model)
    seen: dict[str, Stage] = {}
    top = {"model", "teacher"}
    for ref in references(header.teacher or ""):
        if ref not in {s.name for s in stages} and ref not in top:
            problems.append(f"{source.where(('teacher',))}: teacher refers to ${{{ref}}}, which is no stage; name a stage's output")
    # the stage whose output is the teacher (``teacher: ${model}`` names the recipe's model: there from the start)
    teacher_stage = [ref for ref in references(header.teacher or "") if ref not in top]
    for stage in stages:
        for key, value in stage.settings.items():
            for ref in references(value):
                if ref in seen or ref == "model" or (ref == "teacher" and header.teacher):
                    continue
                later = any(s.name == ref for s in stages)
                hint = "a later stage: reorder the stages" if later else "no stage or variable: check the name"
                problems.append(f"{source.where((*stage.location, key))}: {key} refers to ${{{ref}}}, {hint}")
        if stage.command.name == "distill" and not stage.settings.get("teacher"):
            if not header.teacher:
                problems.append(
                    f"{source.where(stage.location)}: distill needs a teacher; set `teacher:` at the top or in the stage "
                    "(e.g. the output of an earlier finetune stage)"
                )
            elif teacher_stage and teacher_stage[0] not in seen:
                problems.append(
                    f"{source.where(stage.location)}: distill runs before its teacher ${{{teacher_stage[0]}}} exists; "
                    "move the teacher's stage before it"
                )
        for method in stage_methods(stage.command.name, stage.settings):
            problem = order_problem(method, applied, methods())
            if problem is not None:
                problems.append(f"{source.where(stage.location)}: {problem}")
            applied[method.name] = f"the output of stage {stage.index + 1} ({stage.command.name})"
        needs_task = stage.command.name in ("importance", "distill", "finetune", "eval", "augment")
        names_data = any(stage.settings.get(k) for k in ("task", "text_columns", "tokens_column", "question_column"))
        if needs_task and not names_data:
            problems.append(f"{source.where(stage.location)}: {stage.command.name} needs a task; set data.task (e.g. sst2)")
        seen[stage.name] = stage
    return problems
