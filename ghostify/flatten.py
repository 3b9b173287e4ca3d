"""Settings dataclasses as flat keywords.

A step takes its shared settings as dataclasses (``data: DataSettings``, ``training: TrainSettings``),
while CLI flags, recipe keys and the history of a checkpoint name each field on its own
(``learning_rate``). The functions here translate: :func:`flat_parameters` lists a function's
parameters with every dataclass-typed one replaced by its fields (what the recipe schema and the
CLI declare), :func:`pack` gathers flat values back into the dataclasses, and :func:`flat_settings`
lets Python callers use either form: ``finetune(m, out, task="sst2", epochs=2)`` is
``finetune(m, out, data=DataSettings(task="sst2"), training=TrainSettings(epochs=2))``.

Example:
    >>> from ghostify.steps import distill
    >>> pack(distill, {"task": "sst2", "epochs": 1})["training"].epochs
    1
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .settings import INTERNAL

EMPTY = inspect.Parameter.empty


@dataclass(frozen=True)
class FlatParameter:
    name: str
    annotation: Any  # the resolved type
    default: Any  # EMPTY when the caller must give it
    group: str | None = None  # the dataclass parameter it is a field of (None: a parameter of its own)


def setting_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of a settings dataclass that callers set (not the internal ones)."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get(INTERNAL)]


@functools.cache
def settings_parameters(function: Callable[..., Any]) -> dict[str, type]:
    """The parameters of ``function`` typed with a dataclass, with that class."""
    function = inspect.unwrap(function)
    hints = typing.get_type_hints(function)
    return {name: hints[name] for name in inspect.signature(function).parameters
            if isinstance(hints.get(name), type) and dataclasses.is_dataclass(hints[name])}


@functools.cache
def flat_parameters(function: Callable[..., Any]) -> tuple[FlatParameter, ...]:
    """The parameters of ``function`` in order, each dataclass-typed one replaced by its fields
    (defaults from the parameter's default instance, else the field's)."""
    function = inspect.unwrap(function)
    hints = typing.get_type_hints(function)
    groups = settings_parameters(function)
    flat: list[FlatParameter] = []
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        cls = groups.get(name)
        if cls is None:
            flat.append(FlatParameter(name, hints.get(name, Any), parameter.default))
            continue
        instance = parameter.default if isinstance(parameter.default, cls) else None
        field_hints = typing.get_type_hints(cls)
        for f in setting_fields(cls):
            default = getattr(instance, f.name) if instance is not None else _field_default(f)
            flat.append(FlatParameter(f.name, field_hints[f.name], default, group=name))
    names = [p.name for p in flat]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TypeError(f"{function.__qualname__}: {', '.join(twice)} named by two parameters or settings fields")
    return tuple(flat)


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return EMPTY


def pack(function: Callable[..., Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with the flat fields of ``function``'s settings gathered into their
    dataclasses, over the instance given for that parameter (or its default); other arguments
    pass unchanged."""
    groups = settings_parameters(function)
    owner = {p.name: p.group for p in flat_parameters(function) if p.group is not None}
    packed = {k: v for k, v in arguments.items() if k not in owner}
    fields: dict[str, dict[str, Any]] = {}
    for key, value in arguments.items():
        if key in owner:
            fields.setdefault(owner[key], {})[key] = value
    signature = inspect.signature(inspect.unwrap(function))
    for group, values in fields.items():
        base = packed.get(group)
        if base is None:
            default = signature.parameters[group].default
            base = default if isinstance(default, groups[group]) else groups[group]()
        packed[group] = dataclasses.replace(base, **values)
    return packed


def flat_settings(function: Callable[..., Any]) -> Callable[..., Any]:
    """Let callers of ``function`` give the fields of its settings dataclasses as flat keywords
    (``epochs=2`` for ``training=TrainSettings(epochs=2)``); a flat keyword overrides the same
    field of an instance given alongside it."""
    flat_parameters(function)  # a name clash fails at import, not at the first call

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **pack(function, kwargs))

    return call


def checks_arguments(step: Callable[..., Any], check: Callable[..., None]) -> Callable[..., Any]:
    """Give ``step`` its ``check_arguments``: the refusals of its arguments that need no file read (called with
    the step's arguments as keywords, settings dataclasses packed; it takes ``**_`` for the others). The step
    makes them first; a recipe makes them for every stage before any stage runs (``ghostify.recipe``)."""
    step.check_arguments = check  # type: ignore[attr-defined]
    return step


__all__ = ["FlatParameter", "checks_arguments", "flat_parameters", "flat_settings", "pack", "setting_fields", "settings_parameters"]
