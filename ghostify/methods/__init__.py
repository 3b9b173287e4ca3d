"""The structural compression methods, listed once: the only door through which the rest of
ghostify (checkpoints, the record, ``info``, ``export``, the CLI and the recipe runner) reaches them.

``METHODS`` is the order in which ``load_model`` rebuilds a checkpoint's structure before its
weights load strictly: sharing first (later steps see the distinct layers), then dropped layers,
the hidden size (the residual stream's width, with the head width it keeps), pruning (the heads' and
FFN widths), grouped layers (built at those widths), ghost modules (wrapping the projections),
factorised embeddings and reference attention. Adding a method is one folder here
(its :class:`~ghostify.methods.base.Method`) and one line in :func:`_shipped`; a method from
another package registers itself through the ``ghostify.methods`` entry point group (the entry
point names its ``Method``), or with :func:`register` before it is used.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError
from .base import (DEFAULT_SEED, Context, Entry, Examples, Method, add, channel_origin, check_order, distinct_layers,
                   layer_origin, lazy, order_problem, refusal, registry, registry_loaded, set_loader, setting)

if TYPE_CHECKING:
    from torch import nn

    from ..architectures import ArchitectureAdapter
    from ..record import GhostifyRecord

#: the entry point group through which an installed package adds a method
ENTRY_POINT_GROUP = "ghostify.methods"


def _shipped() -> tuple[Method, ...]:
    """The methods ghostify ships, in restore order (their declarations import no torch)."""
    # each method's package imports this one's (its base): the registry imports them when it is first needed
    from . import dropped_layers, embeddings, ghost, grouped, hidden, pruning, references, sharing

    return (
        sharing.METHOD,
        dropped_layers.METHOD,
        hidden.METHOD,  # before pruning: it rebuilds the attention at the recorded head width, pruning then cuts heads
        pruning.METHOD,
        grouped.METHOD,
        ghost.METHOD,
        embeddings.METHOD,
        references.METHOD,
    )


def shipped() -> tuple[Method, ...]:
    """The methods ghostify ships (no plug-in is loaded to list them: ``ghostify --version`` needs none)."""
    return _shipped()


@dataclass(frozen=True)
class Plugin:
    """One entry point of the ``ghostify.methods`` group, and what came of loading it."""

    #: the entry point's name and what it names (``package.module:ATTRIBUTE``)
    name: str
    value: str
    #: the installed distribution that declares it (None where the metadata does not say)
    distribution: str | None
    #: the method's name, once its value loaded as a Method
    method: str | None
    #: why it is not registered (None: it is)
    problem: str | None = None

    def describe(self) -> str:
        of = f" of the distribution {self.distribution}" if self.distribution else ""
        return f"the plug-in {self.name} = {self.value} ({ENTRY_POINT_GROUP} entry point{of})"


#: every entry point the registry found, loaded or not (filled when the registry is first needed)
_PLUGINS: list[Plugin] = []


@dataclass(frozen=True)
class Declared:
    """A plug-in's command as its installed metadata declares it, read without importing the plug-in (whose import
    may be slow, or hang): the entry point's name is the command, and its one-line help is the distribution's
    summary (``description`` in its ``pyproject.toml``). ``ghostify --help`` lists it; the plug-in is imported
    when its command runs."""

    command: str
    help: str


def declared_commands() -> tuple[Declared, ...]:
    """The commands of the ``ghostify.methods`` entry points, from the installed metadata alone."""
    from importlib.metadata import entry_points

    out = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(point, "dist", None)
        summary = " ".join(str(dist.metadata.get("Summary") or "").split()) if dist is not None else ""
        where = f"the plug-in {dist.name}" if dist is not None else "a plug-in"
        out.append(Declared(point.name, f"{summary} ({where})" if summary else f"A method of {where}."))
    return tuple(out)


def plugin(entry_point: str) -> Plugin | None:
    """What came of loading the entry point named ``entry_point`` (loads the registry); None where none is named so."""
    registry()
    return next((p for p in _PLUGINS if p.name == entry_point), None)


def _load() -> tuple[Method, ...]:
    from importlib.metadata import entry_points

    loaded = _shipped()
    _PLUGINS.clear()
    for point in entry_points(group=ENTRY_POINT_GROUP):
        # a plug-in's fault (an import that raises, a value that is no Method, a name or command that is taken)
        # costs that plug-in alone: one warning, and --help and every other command keep working
        method: Any = None
        try:
            method = point.load()
            problem = refusal(method, loaded)
        except (Exception, SystemExit) as exc:  # whatever its import raises (a sys.exit() too; never Ctrl-C)
            text = str(exc).strip().splitlines()
            problem = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
        dist = getattr(point, "dist", None)
        plugin = Plugin(point.name, point.value, getattr(dist, "name", None),
                        method.name if isinstance(method, Method) else None, problem)
        _PLUGINS.append(plugin)
        if problem is None:
            loaded += (method,)
            if method.command != point.name and method.apply is not None:  # the contract before plug-ins declared it
                warnings.warn(f"{plugin.describe()}: its command is {method.command}, but its entry point is named "
                              f"{point.name}, which `ghostify --help` lists (without importing the plug-in); name the "
                              f"entry point {method.command}", stacklevel=2)
        else:
            warnings.warn(f"{plugin.describe()} is not loaded: {problem}; fix or uninstall it", stacklevel=2)
    return loaded


set_loader(_load)


def broken_plugins() -> tuple[Plugin, ...]:
    """The entry points that are not registered, each with its problem (loads the registry)."""
    registry()
    return tuple(p for p in _PLUGINS if p.problem is not None)


def origin(method: Method) -> str:
    """Where ``method`` comes from, for a message: its plug-in, or ghostify itself."""
    registry()
    plugin = next((p for p in _PLUGINS if p.problem is None and p.method == method.name), None)
    if plugin is not None:
        return plugin.describe()
    return f"ghostify's method {method.name}" if method in _shipped() else f"the registered method {method.name}"


def register(method: Method) -> Method:
    """Add ``method`` to the registry (after the shipped ones and the entry points'); returns it."""
    add(method)
    return method


def methods() -> tuple[Method, ...]:
    """Every registered method, in restore order."""
    return registry()


def by_name(name: str) -> Method:
    return next(m for m in registry() if m.name == name)


def applied_by(command: str) -> Method | None:
    """The method the command ``command`` applies on its own (``prune``: pruning), or None."""
    return next((m for m in registry() if m.command == command and m.apply is not None), None)


def __getattr__(name: str) -> Any:  # METHODS and BY_NAME, as they are now (plug-ins may register late)
    if name == "METHODS":
        return registry()
    if name == "BY_NAME":
        return {m.name: m for m in registry()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def restore_all(model: nn.Module, adapter: ArchitectureAdapter, record: GhostifyRecord, source: str) -> None:
    """Rebuild every recorded structural change of ``record`` on a freshly built ``model``."""
    for method in registry():
        method.restore(model, adapter, record, source)


def validate_record(record: GhostifyRecord, config: Any, source: str) -> None:
    """Refuse a record with an entry no registered method reads (a newer ghostify's, or a plug-in's
    that is not installed), of a newer format, or that its method finds tampered with."""
    known = {m.name: m for m in registry()}
    for name, entry in record.methods.items():
        method = known.get(name)
        if method is None:
            broken = next((p for p in _PLUGINS if p.problem is not None and name in (p.name, p.method)), None)
            if broken is not None:  # installed, but it failed to load: say why, not "not installed"
                raise CheckpointError(f"{source} records the method {name!r} of {broken.describe()}, which is not "
                                      f"loaded: {broken.problem}; fix or reinstall the plug-in")
            raise CheckpointError(f"{source} records a method {name!r} that this ghostify does not know: it was written by "
                                  "a newer ghostify or with a plug-in method; upgrade ghostify or install the plug-in")
        if not isinstance(entry, dict):
            raise CheckpointError(f"corrupt ghostify record in {source}: methods.{name} = {entry!r}: expected a mapping; "
                                  "re-create the checkpoint")
        try:
            version = int(entry.get("format", 1))
        except (TypeError, ValueError):
            raise CheckpointError(f"corrupt ghostify record in {source}: methods.{name}.format = {entry.get('format')!r}: "
                                  "expected an integer; re-create the checkpoint") from None
        if version > method.entry_format:
            raise CheckpointError(f"{source} was written by a newer ghostify ({name} record format {version}); "
                                  "upgrade ghostify")
        if method.validate is not None:
            method.validate(entry, config, source)


def save_all(model: nn.Module, directory: Any, record: GhostifyRecord) -> None:
    """Every method's extra files beside the weights; a hook may complete its entry."""
    for method in registry():
        entry = record.entry(method.name)
        if method.save is not None and entry:
            record.methods[method.name] = method.save(model, directory, entry)


def measure_all(model: nn.Module, flop_counts: Any) -> dict[str, Any]:
    """What every method measures on a loaded model, for ``ghostify info``."""
    out: dict[str, Any] = {}
    for method in registry():
        if method.measure is not None:
            out.update(method.measure(model, flop_counts))
    return out


def describe_all(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every method's rows for ``ghostify info``, in the registry's order."""
    return [row for method in registry() for row in method.describe(info)]


def stage_methods(command: str, settings: Mapping[str, Any]) -> list[Method]:
    """The methods a recipe stage of ``command`` with ``settings`` applies."""
    return [m for m in registry() if m.applies(command, settings)]


def applied_names(record: GhostifyRecord | None) -> dict[str, str]:
    """name -> "the model" for every method ``record`` says ran."""
    return {m.name: "the model" for m in registry() if m.present(record)}


def export_refusals(record: GhostifyRecord, format: str) -> list[str]:
    """Why a model with ``record`` cannot be exported to ``format`` (one reason per method)."""
    out = []
    for method in registry():
        entry = record.entry(method.name)
        if entry and method.export_refusal is not None:
            reason = method.export_refusal(entry, format)
            if reason:
                out.append(reason)
    return out


def hook_module(hook: Any) -> str:
    """The module a hook's code lives in (what an export flattens beside the model)."""
    return hook.module if isinstance(hook, lazy) else hook.__module__


__all__ = ["DEFAULT_SEED", "ENTRY_POINT_GROUP", "Context", "Declared", "Entry", "Examples", "METHODS", "Method", "Plugin",
           "applied_by", "applied_names", "broken_plugins", "by_name", "channel_origin", "check_order", "declared_commands",
           "describe_all", "distinct_layers", "export_refusals", "hook_module", "layer_origin", "lazy", "measure_all", "methods",
           "order_problem", "origin", "plugin", "register", "registry_loaded", "restore_all", "save_all", "setting", "shipped",
           "stage_methods", "validate_record"]
