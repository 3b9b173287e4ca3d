"""One command per registered method that a command of its own applies (``prune``,
``attach-ghost``, ``drop-layers``, ...), generated from the method's declaration: its settings
fields are the options (help, flag and default from the field), its ``help`` and ``examples`` the
``--help`` text, and what it prints is its own ``describe`` of the record it wrote.

A plug-in's command is made only when it is named: ``ghostify --help`` lists it by its entry point's name and its
distribution's summary, read from the installed metadata (importing a plug-in may be slow, or hang)."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
import warnings
from typing import Annotated, Any, Optional

import typer

from ...errors import GhostifyError
from ...methods import DEFAULT_SEED, Method, declared_commands, methods, origin, plugin, registry_loaded, shipped
from ..app import BEFORE_COMMANDS, LATE, app, sort_commands
from ..console import err
from ..inputs import check_paths
from ..options import Model, Output, Overwrite, Seed

KEYWORD = inspect.Parameter.KEYWORD_ONLY


def _option(field: dataclasses.Field, annotation: Any) -> Any:
    """The Typer option of one settings field (``setting(...)``'s help, flag and option arguments)."""
    meta = field.metadata
    option = dict(meta.get("option") or {})
    annotation = option.pop("type", annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = Optional[inner[0]] if len(inner) == 1 else annotation  # noqa: UP007 - Typer reads Optional
    flag = meta.get("flag") or "--" + field.name.replace("_", "-")
    return Annotated[annotation, typer.Option(flag, help=meta.get("help", ""), **option)]


def _parameters(method: Method) -> list[inspect.Parameter]:
    """The command's parameters: each default is the settings field's own (as the step's is)."""
    hints = typing.get_type_hints(method.settings)
    parameters = [inspect.Parameter("model", KEYWORD, annotation=Model),
                  inspect.Parameter("output", KEYWORD, annotation=Output)]
    for f in dataclasses.fields(method.settings):
        default = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
        parameters.append(inspect.Parameter(f.name, KEYWORD, annotation=_option(f, hints[f.name]), default=default))
    if method.seeded:
        parameters.append(inspect.Parameter("seed", KEYWORD, annotation=Seed, default=DEFAULT_SEED))
    parameters.append(inspect.Parameter("overwrite", KEYWORD, annotation=Overwrite, default=False))
    return parameters


def _what(field: dataclasses.Field) -> str:
    """What a path setting reads, for its refusal: the first clause of its help."""
    text = str(field.metadata.get("help", "")).split(";")[0].strip().rstrip(".")
    return text[:1].lower() + text[1:]


def summary(method: Method, record: Any) -> list[str]:
    """What the command prints about the model it wrote: the method's own ``describe`` rows."""
    info = {"methods": record.methods, **record.methods, "heads_per_layer": record.heads_per_layer,
            "ffn_per_layer": list(record.ffn), "history": record.history}
    return [f"{what}: {value}" for what, value in method.describe(info)]


#: the commands made so far, by name
_MADE: set[str] = set()


def method_command(method: Method) -> None:
    """Register ``method``'s command on the app."""
    fields = {f.name: f for f in dataclasses.fields(method.settings)}
    paths = {name: _what(fields[name]) for name in method.path_settings if name in fields}

    def command(**options: Any) -> None:
        from ... import steps  # torch and transformers: loaded when a command runs, not for --help

        output = options["output"]
        record = steps.apply_method(method, options.pop("model"), options.pop("output"), **options)
        for line in summary(method, record):
            err.print(line, markup=False)
        err.print(f"wrote {output}", markup=False)

    command.__name__ = method.command.replace("-", "_")
    command.check_options = lambda options: check_paths(options, paths)  # type: ignore[attr-defined]
    parameters = _parameters(method)
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters}
    command.__doc__ = method.help
    epilog = "Examples:\n\n" + "\n\n".join(method.examples) if method.examples else None
    app.command(method.command, epilog=epilog)(command)
    _MADE.add(method.command)


def add_plugin_commands() -> None:
    """Make the commands of the methods that are not ghostify's own (the entry points' plug-ins, loaded
    here, and methods registered in Python). A plug-in whose settings make options the command line cannot take
    (Typer builds every command at once) loses its command with one warning, rather than taking down
    every command."""
    for method in methods():
        if method.apply is None or method.command in _MADE:
            continue
        made = len(app.registered_commands)
        try:
            method_command(method)
            typer.main.get_command_from_info(app.registered_commands[-1], pretty_exceptions_short=app.pretty_exceptions_short,
                                             rich_markup_mode=app.rich_markup_mode)
        except Exception as exc:  # Typer's own errors: an option type it does not support, a clashing flag
            del app.registered_commands[made:]
            _MADE.discard(method.command)
            text = str(exc).strip().splitlines()
            warnings.warn(f"{origin(method)}: its command {method.command} is left out ({type(exc).__name__}"
                          f"{': ' + text[0] if text else ''}); fix the plug-in's settings", stacklevel=2)
    sort_commands()


def add_loaded_commands() -> None:
    """Before the command line is read: the commands of the methods registered already (in Python, or plug-ins a
    caller loaded), which costs no import; the other plug-ins' wait until one is named (:func:`make_late`)."""
    if registry_loaded():
        add_plugin_commands()


def listed_late() -> list[tuple[str, str]]:
    """The plug-ins' commands, by their entry point's name and distribution's summary (no plug-in imported); none
    once the registry is loaded (their commands are made then)."""
    if registry_loaded():
        return []
    return [(d.command, d.help) for d in declared_commands() if d.command not in _MADE]


def make_late(name: str) -> str | None:
    """The command answering to ``name``, made: the plug-ins are imported (and every method's command made), and
    ``name`` is a command, or the entry point of a plug-in whose command has another name (the contract before
    plug-ins declared it). A plug-in that failed to load is refused in one line; None where nothing answers."""
    add_plugin_commands()
    if name in _MADE:
        return name
    found = plugin(name)
    if found is None:
        return None
    if found.problem is not None:
        raise GhostifyError(f"the command {name} is {found.describe()}, which is not loaded: {found.problem}; fix or "
                            "uninstall it")
    command = next((m.command for m in methods() if m.name == found.method), None)
    return command if command in _MADE else None


for _method in shipped():  # the plug-ins' commands join when one is named (make_late)
    if _method.apply is not None:
        method_command(_method)
BEFORE_COMMANDS.append(add_loaded_commands)
LATE.listed, LATE.make = listed_late, make_late
