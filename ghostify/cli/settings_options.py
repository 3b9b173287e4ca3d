"""Settings dataclasses as CLI options: a command declares ``training: TrainSettings`` and gets one
option per field (``--learning-rate``, as declared in ``options.SETTING_OPTIONS``, with the
field's default); the parsed options are packed back into the dataclass before the command runs."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

from ..flatten import flat_parameters, pack
from .options import CONVERTERS, SETTING_OPTIONS

KEYWORD = inspect.Parameter.KEYWORD_ONLY  # Typer passes every value by name


def settings_options(command: Callable[..., Any] | None = None, *,
                     after: dict[str, str] | None = None) -> Callable[..., Any]:
    """``command`` with its settings dataclass parameters replaced by their fields' options, for
    ``app.command()`` to read; called with them, it calls ``command`` with the dataclasses.
    ``after`` lists options by the one they follow in ``--help`` (``{"split": "dataset"}``), where
    that is not their place in the signature."""
    if command is None:
        return lambda function: settings_options(function, after=after)
    hints = typing.get_type_hints(command, include_extras=True)  # the Annotated options of the rest
    parameters = []
    for parameter in flat_parameters(command):
        if parameter.group is None:
            annotation = hints[parameter.name]
        elif parameter.name in SETTING_OPTIONS:
            annotation = SETTING_OPTIONS[parameter.name]
        else:
            raise TypeError(f"{command.__name__}: no CLI option for setting {parameter.name!r}; declare it in "
                            "ghostify/cli/options.py SETTING_OPTIONS")
        parameters.append(inspect.Parameter(parameter.name, KEYWORD, annotation=annotation, default=parameter.default))
    for name, previous in (after or {}).items():
        moved = next(p for p in parameters if p.name == name)
        parameters.remove(moved)
        parameters.insert(next(i for i, p in enumerate(parameters) if p.name == previous) + 1, moved)

    def packed(options: dict[str, Any]) -> dict[str, Any]:
        return pack(command, {name: CONVERTERS[name](value) if name in CONVERTERS else value
                              for name, value in options.items()})

    @functools.wraps(command)
    def run(**options: Any) -> Any:
        return command(**packed(options))

    def check_options(options: dict[str, Any]) -> None:
        """Each settings dataclass's own checks, run by the app before the command loads any library."""
        for value in packed(options).values():
            if dataclasses.is_dataclass(value) and callable(getattr(value, "validate", None)):
                value.validate()

    run.check_options = check_options  # type: ignore[attr-defined]
    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return run
