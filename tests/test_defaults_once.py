"""Every default declared once (issue 25): for every command registered on the Typer app, each
option that is also a keyword of the step the command calls has the step's default, and the
default of the settings field that declares it; and no default is written as a literal both in
the command (``ghostify/cli/commands/``) and in its step.

The field that declares an option belongs to the command: a settings group its step takes
(``training: TrainSettings``), the settings of a method the command applies
(``ghostify.methods``), or a dataclass one of the two defaults names (``BenchDefaults.seq_len``).
The same name elsewhere can mean something else: ``eval --batch-size`` (64, no gradients) is not
training's ``--batch-size`` (32), nor ``share-layers --init`` the ghost modules' ``--init``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import typer.main

import ghostify.methods
from ghostify import steps
from ghostify.cli import app
from ghostify.flatten import EMPTY, flat_parameters, settings_parameters
from ghostify.recipe.compress import compress

REPO = Path(__file__).resolve().parents[1]
#: the step a command calls, where its name is not the command's (``attach-ghost``: ``steps.attach_ghost``)
STEP_NAMES = {"eval": "evaluate"}
STRUCTURAL = ("prune", "attach-ghost", "group-linear", "factorize-embeddings", "share-layers", "drop-layers")
#: commands whose function runs recipes, so it lives above the steps (in ghostify.recipe)
ABOVE_STEPS = {"compress": compress}
#: not values chosen once: None is "not given" (the step decides), False a switch left off; the
#: first test still checks that the command and the step agree on them
ABSENT = (None, False)


def _commands() -> dict[str, click.Command]:
    return dict(typer.main.get_command(app).commands)


def _cases() -> list[Any]:
    return sorted(_commands())


def _step(name: str) -> Callable[..., Any] | None:
    """The step function ``ghostify <name>`` calls (None: it calls none, like ``run`` and ``report``)."""
    if name in ABOVE_STEPS:
        return ABOVE_STEPS[name]
    return getattr(steps, STEP_NAMES.get(name, name.replace("-", "_")), None)


def _method_settings(name: str) -> list[type]:
    """The settings dataclasses of the methods command ``name`` applies."""
    found = (getattr(m, "settings", None) for m in ghostify.methods.METHODS if m.command == name)
    return [cls for cls in found if isinstance(cls, type) and dataclasses.is_dataclass(cls)]


# ---- the source of a function's defaults ----------------------------------------------------------

def _definition(function: Callable[..., Any]) -> tuple[Path, ast.FunctionDef] | None:
    """Where ``function`` (unwrapped from its decorators) is written: its file and its ``def``, or
    None when no module-level ``def`` of that name exists (a command generated from declarations)."""
    function = inspect.unwrap(function)
    path = Path(inspect.getsourcefile(function))
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function.__name__:
            return path, node
    return None


def _default_nodes(function: Callable[..., Any]) -> dict[str, ast.expr]:
    found = _definition(function)
    if found is None:
        return {}
    arguments = found[1].args
    positional = arguments.posonlyargs + arguments.args
    pairs = list(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None]
    return {argument.arg: default for argument, default in pairs}


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        return False, None


def _named_settings(function: Callable[..., Any]) -> dict[str, type]:
    """Parameter -> the dataclass whose field its default reads (``x: int = Defaults.x``)."""
    function = inspect.unwrap(function)
    named = {}
    for parameter, node in _default_nodes(function).items():
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = function.__globals__.get(node.value.id)
            if isinstance(owner, type) and dataclasses.is_dataclass(owner):
                named[parameter] = owner
    return named


# ---- the checks (functions, so that a test can show they fail) -------------------------------------

def _field_default(cls: type, name: str) -> Any:
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if field is None:
        return None
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else EMPTY


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def mismatches(command: click.Command, step: Callable[..., Any] | None, function: Callable[..., Any],
               method_settings: list[type] = ()) -> tuple[list[str], list[str]]:
    """(what disagrees, the options checked): each option of ``command`` against the default of the
    same keyword of ``step`` and of the same field of every dataclass that declares the command's
    settings. ``function`` is the command's own Python function (its source names classes)."""
    declared = {p.name: p.default for p in flat_parameters(step)} if step is not None else {}
    classes = [*(settings_parameters(step).values() if step is not None else ()), *method_settings]
    named = _named_settings(function)
    if step is not None:
        named = {**_named_settings(step), **named}
    # a step's settings parameter whose default instance sets a field (compress: Deployment(runtime=...)) declares it
    instances = {type(p.default): p.default for p in inspect.signature(inspect.unwrap(step)).parameters.values()
                 if dataclasses.is_dataclass(p.default) and not isinstance(p.default, type)} if step is not None else {}
    problems, checked = [], []
    for option in command.params:
        have = EMPTY if option.required else option.default
        wants = []
        if option.name in declared:
            wants.append((f"the step's keyword {option.name}", declared[option.name]))
        for cls in {*classes, *([named[option.name]] if option.name in named else [])}:
            if option.name in {f.name for f in dataclasses.fields(cls)}:
                if cls in instances:
                    wants.append((f"the step's {cls.__name__}(...).{option.name}", getattr(instances[cls], option.name)))
                else:
                    wants.append((f"{cls.__name__}.{option.name}", _field_default(cls, option.name)))
        for what, want in wants:
            if not _same(have, want):
                shown = "required" if have is EMPTY else repr(have)
                problems.append(f"{command.name} {option.opts[0]}: the option's default is {shown}, {what}'s is "
                                f"{'required' if want is EMPTY else repr(want)}")
        if wants:
            checked.append(option.name)
    return problems, checked


def literal_duplicates(function: Callable[..., Any], step: Callable[..., Any] | None) -> list[str]:
    """Parameters of both the command's function and its step whose default is written as a
    literal (other than None and False) in either: in both, the value is written twice; in one,
    the other reads it from somewhere else (the first test makes them equal), so it is declared
    twice all the same. Declared once, both name the one declaration (``Defaults.x``)."""
    if step is None:
        return []
    ours, theirs = _default_nodes(function), _default_nodes(step)
    found = []
    for name in ours.keys() & theirs.keys():
        (mine, value), (other, other_value) = _literal(ours[name]), _literal(theirs[name])
        mine = mine and not any(value is v for v in ABSENT)
        other = other and not any(other_value is v for v in ABSENT)
        if mine or other:
            here = f"{ast.unparse(ours[name])} in {_shown(_definition(function)[0])}:{ours[name].lineno}"
            there = f"{ast.unparse(theirs[name])} in {_shown(_definition(step)[0])}:{theirs[name].lineno}"
            found.append(f"{name} = {here} and {there}")
    return sorted(found)


def _command_function(name: str) -> Callable[..., Any]:
    info = next(i for i in app.registered_commands if (i.name or i.callback.__name__.replace("_", "-")) == name)
    return inspect.unwrap(info.callback)


# ---- every registered command ------------------------------------------------------------------------

def test_every_registered_command_is_covered():
    names = set(_commands())
    assert {"importance", "distill", "finetune", "eval", "bench", "export", "augment", "info", "run", "report"} <= names
    assert set(STRUCTURAL) <= names
    assert {name for name in names if _step(name) is None} == {"run", "report"}  # what else calls no step


@pytest.mark.parametrize("name", _cases())
def test_option_defaults_are_the_steps_and_the_settings(name):
    problems, checked = mismatches(_commands()[name], _step(name), _command_function(name), _method_settings(name))
    assert not problems, "\n".join(problems)
    if _step(name) is not None:  # the comparison ran on the command's own keywords, not on nothing
        assert checked, f"{name}: no option shares a keyword with its step"


@pytest.mark.parametrize("name", _cases())
def test_no_default_is_written_twice(name):
    found = literal_duplicates(_command_function(name), _step(name))
    for line in found:
        print(f"{name}: {line}")
    assert found == [], f"{name}: {len(found)} default(s) written both in the command and in its step " \
                        "(declare each once, e.g. a field in ghostify/settings.py that both name):\n" + "\n".join(found)


# ---- the checks fail where they should -----------------------------------------------------------------

_FAKE = '''
from dataclasses import dataclass
from typing import Annotated

import typer


@dataclass(frozen=True)
class Defaults:
    size: int = 5


def command(
    rounds: Annotated[int, typer.Option("--rounds")] = 3,
    size: Annotated[int, typer.Option("--size")] = {size},
    name: Annotated[str, typer.Option("--name")] = "a",
    seed: Annotated[float, typer.Option("--seed")] = 0.0,
    quiet: Annotated[bool, typer.Option("--quiet")] = False,
) -> None:
    pass


def step(*, rounds: int = 4, size: int = Defaults.size, name: str = "a", seed: int = 0, quiet: bool = False) -> None:
    pass
'''


def _fake(tmp_path: Path, size: str) -> tuple[click.Command, Any]:
    path = tmp_path / f"fake_{size.replace('.', '_')}.py"
    path.write_text(_FAKE.format(size=size))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fake = typer.Typer()
    fake.command()(module.command)
    return typer.main.get_command(fake), module


def test_a_literal_that_differs_from_the_step_or_the_field_fails(tmp_path):
    command, module = _fake(tmp_path, "6")
    problems, checked = mismatches(command, module.step, module.command)
    assert set(checked) == {"rounds", "size", "name", "seed", "quiet"}
    assert any(p.endswith("--rounds: the option's default is 3, the step's keyword rounds's is 4") for p in problems)
    assert any("--size" in p and "Defaults.size's is 5" in p for p in problems)
    assert any("--seed" in p for p in problems)  # 0.0 is not the step's int 0
    assert len(problems) == 4

    command, module = _fake(tmp_path, "Defaults.size")  # read from the one declaration: agrees
    problems, _ = mismatches(command, module.step, module.command)
    assert not any("--size" in p for p in problems)


def test_a_default_written_in_both_places_is_counted(tmp_path):
    _, module = _fake(tmp_path, "Defaults.size")
    found = literal_duplicates(module.command, module.step)
    assert [line.split(" = ")[0] for line in found] == ["name", "rounds", "seed"]  # not size (declared once), not quiet (off)
    _, module = _fake(tmp_path, "5")  # the field's value, written again in the command
    assert "size = 5 in fake_5.py:15 and Defaults.size in fake_5.py:23" in literal_duplicates(module.command, module.step)
