"""The contract every structural compression method follows: one plug-in, one shape.

A method is one folder under ``ghostify/methods/`` and one :class:`Method` value, registered once
(:func:`ghostify.methods.register`). What it declares is all the rest of ghostify needs:

- ``settings``: a dataclass whose fields (with :func:`setting`: the help text and CLI flag) are
  the command's options, the recipe stage's keys and the Python keywords, and what its record
  entry keeps;
- ``check(config, record, settings)``: refusals that need only the config and the record, before
  any weight is read;
- ``apply(model, record, settings, context)``: change the model in place and return an :class:`Entry`
  (the method's record entry, with its format number, and the new per-layer heads and FFN sizes
  when it changes them);
- ``restore(model, adapter, record, source)``: rebuild the structure on a freshly built model from
  its entry (``record.entry(name)``), before the weights load strictly (also the code an ``export --format hf`` carries);
- ``describe(info)``: ``(what, value)`` rows for ``ghostify info`` and the command's summary;
- optional hooks: ``validate`` (the entry against the config, when a checkpoint is read),
  ``save`` (extra files beside the weights), ``finish_export`` (what the exported remote code runs
  after the restores), ``export_refusal``, ``distinct_layers`` (how many distinct layers a config builds).

The record keeps each applied method's entry under ``methods: {name: entry}``; a method states which
methods it must come before, which the recipe validator checks for a whole recipe before anything
runs and every command checks against the record of the model it reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import GhostifyError
from ..settings import DEFAULT_SEED  # a seeded method's --seed, seed:, seed= (every command's)

if TYPE_CHECKING:  # the contract needs neither at run time, and `ghostify --help` must not load torch
    from pathlib import Path

    from torch import nn

    from ..architectures import ArchitectureAdapter
    from ..record import GhostifyRecord  # noqa: F401 - in the string annotations


#: ``check(config, record, settings)``: refuse what needs no weights (record None: a plain model)
Check = Callable[[Any, "GhostifyRecord | None", Any], None]
#: ``apply(model, record, settings, context)``: change ``model`` in place; its record entry
Apply = Callable[["nn.Module", "GhostifyRecord", Any, "Context"], "Entry"]
#: ``restore(model, adapter, record, source)``: rebuild the recorded structure (no entry: a no-op)
Restore = Callable[["nn.Module", "ArchitectureAdapter", Any, str], None]
#: ``describe(info)``: (what, value) rows for ``ghostify info`` from its JSON summary
Describe = Callable[[Mapping[str, Any]], list[tuple[str, str]]]


def setting(default: Any = dataclasses.MISSING, *, help: str, flag: str | None = None, **option: Any) -> Any:
    """A field of a method's settings dataclass: ``help`` is its ``--help`` text, ``flag`` its CLI
    declaration (default: ``--field-name``; ``--x/--no-x`` for a switch) and ``option`` the rest of
    what the option says (``min=1``, ``show_default=False``). The field's name is the recipe key and
    the Python keyword; its default is the one default of all three."""
    metadata = {"help": help, "flag": flag, "option": option}
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Examples:
    """Unlabelled examples of a task's data, as batches of model inputs, and ``distance(output, teacher_output,
    batch)``: how far a model's outputs on a batch are from a teacher's by the task's own measure (0: the same)."""

    batches: list
    #: None where only the batches are wanted (a recipe counts them before its stages run)
    distance: Callable[[Any, Any, Mapping[str, Any]], float] | None = None


#: ``examples(model, data, count, seed, batch_size)``: ``count`` unlabelled training examples (a seeded subset) of
#: the data ``data`` describes (what ``ghostify importance`` recorded of its data: ``{"data": ..., "task": ...}``),
#: tokenised by ``model``'s tokenizer, in batches of ``batch_size``; the command's step layer provides it
ReadExamples = Callable[[str, Mapping[str, Any], int, int, int], Examples]


@dataclass(frozen=True)
class Context:
    """What ``apply`` may need besides the model: where it was read from, the seed of what it draws, and
    a way to read unlabelled examples of a task's data (mask tuning)."""

    source: str
    seed: int = 0
    examples: ReadExamples | None = None


@dataclass(frozen=True)
class Entry:
    """What ``apply`` returns: the method's record entry (``data``, saved with ``format``; None for
    a method whose whole record is the per-layer widths) and, when the method changes which layers
    exist or how wide they are, the record's new ``heads`` and ``ffn`` lists."""

    format: int
    data: dict[str, Any] | None
    heads: list[list[int]] | None = None
    ffn: list[int] | None = None
    #: what the checkpoint's history records besides the settings (the scores a pruning used)
    history: dict[str, Any] | None = None

    def stored(self) -> dict[str, Any] | None:
        return None if self.data is None else {**self.data, "format": self.format}


def _no_check(config: Any, record: Any, settings: Any) -> None:
    return None


class lazy:  # noqa: N801 - used like a function: ``restore=lazy("ghostify.methods.ghost.restore:restore")``
    """A hook named by ``"module:function"``, imported on its first call: a method's declaration
    (its settings, help and order rules, which the CLI reads at start-up) costs no torch import."""

    def __init__(self, target: str) -> None:
        self.module, _, self.function = target.partition(":")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(self.module), self.function)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy({self.module}:{self.function})"


@dataclass(frozen=True)
class Method:
    """One structural method: its settings, its lifecycle hooks and its order rules."""

    #: the key of its entry in the record's ``methods`` (and in ``ghostify info --json``)
    name: str
    #: the CLI command / recipe stage that applies it
    command: str
    #: what a model that has it has ("ghost modules"), for messages
    noun: str
    #: the settings dataclass (fields made with :func:`setting`)
    settings: type
    restore: Restore
    describe: Describe
    #: apply it to a loaded model (None: another command applies it, as distill --references)
    apply: Apply | None = None
    check: Check = _no_check
    #: the newest entry format this ghostify reads
    entry_format: int = 1
    #: the command's ``--help`` (first line: the summary) and its examples
    help: str = ""
    examples: tuple[str, ...] = ()
    #: whether a stock transformers config describes a model that has it (fewer layers: a smaller
    #: ``num_hidden_layers``), so that ``export --format hf`` needs no structure code for it
    stock: bool = False
    #: the model card's tag for a model that has it ("ghost", "refbert")
    tag: str = ""
    #: whether ``apply`` draws random numbers (the command then takes ``--seed``)
    seeded: bool = False
    #: settings fields naming input paths (the command never writes them, and checks they exist)
    path_settings: tuple[str, ...] = ()
    #: methods that must not have been applied when this one is (it must come before them)
    before: tuple[str, ...] = ()
    #: whether a model that has it may get it again (re-factorising, re-sharing)
    repeatable: bool = True
    #: a stage setting that must be true for the command to apply it (distill: ``references``)
    when: str | None = None
    #: whether the record says the method ran (pruning's widths are in every record)
    tracked: bool = True
    #: ``validate(entry, config, source)``: refuse a tampered entry when a checkpoint is read
    validate: Callable[[Mapping[str, Any], Any, str], None] | None = None
    #: ``save(model, directory, entry) -> entry``: write extra files beside the weights
    save: Callable[["nn.Module", "Path", dict[str, Any]], dict[str, Any]] | None = None
    #: ``finish_export(model)`` (a :class:`lazy` hook): what the exported remote code runs after the
    #: restores when the record has this method (sharing declares its shared tensors as ties)
    finish_export: lazy | None = None
    #: ``layer_origin(entry) -> (kept, of)``: which layers of the ``of``-layer model it was made from a
    #: model's layers are (drop-layers), so that distillation maps each to the teacher layer it was
    layer_origin: Callable[[Mapping[str, Any]], tuple[list[int], int]] | None = None
    #: ``channel_origin(entry) -> (kept, of)``: which of the ``of`` residual channels of the model it was made
    #: from a model's channels are (prune-hidden), so that distillation compares each hidden state with the
    #: teacher's same channels
    channel_origin: Callable[[Mapping[str, Any]], tuple[list[int], int]] | None = None
    #: ``measure(model, flop_counts) -> dict``: what ``ghostify info`` reports of it, measured on the
    #: loaded model (its parameters' and FLOPs' share; torch's FlopCounterMode counts by module)
    measure: Callable[["nn.Module", Any], dict[str, Any]] | None = None
    #: ``distinct_layers(config, adapter, entry) -> int | None``: the distinct layers a config builds
    distinct_layers: Callable[[Any, "ArchitectureAdapter", Any], int | None] | None = None
    #: ``export_refusal(entry, format) -> str | None``: why a model with it cannot be exported to ``format``
    #: (``"hf"``, ``"onnx"``), as "has ..., which ...": the message starts with the model's path
    export_refusal: Callable[[Mapping[str, Any], str], str | None] | None = None

    def present(self, record: Any) -> bool:
        return self.tracked and record is not None and bool(record.entry(self.name))

    def applies(self, command: str, settings: Mapping[str, Any]) -> bool:
        """Whether a stage of ``command`` with ``settings`` applies this method."""
        return command == self.command and (self.when is None or bool(settings.get(self.when)))

    @property
    def label(self) -> str:
        return f"{self.command} --{self.when}" if self.when else self.command


def order_problem(method: Method, applied: Mapping[str, str], methods: tuple[Method, ...]) -> str | None:
    """Why ``method`` cannot come after the methods in ``applied`` (name -> what applied it:
    "the model" or a recipe stage), or None."""
    by_name = {m.name: m for m in methods}
    if not method.repeatable and method.name in applied:
        return (f"{applied[method.name]} already has {method.noun}; apply {method.label} once, to the model "
                "without them (a checkpoint's history names it)")
    for name in method.before:
        if name in applied and name in by_name:
            later = by_name[name]
            return (f"{applied[name]} has {later.noun} ({later.label}); {method.label} before {later.label}: "
                    f"apply {method.label} to the checkpoint {later.label} was applied to (its history names it)")
    return None


#: the registry, filled by :mod:`ghostify.methods` (which imports the shipped methods on first use,
#: so that a method's code reaches the order rules through here rather than by importing it)
REGISTRY: list[Method] = []
_LOADER: list[Callable[[], tuple[Method, ...]]] = []
_ADDED: list[Method] = []


def set_loader(loader: Callable[[], tuple[Method, ...]]) -> None:
    """``loader`` lists the shipped methods; it runs when the registry is first needed."""
    _LOADER[:] = [loader]
    REGISTRY.clear()


def refusal(method: Any, methods: tuple[Method, ...]) -> str | None:
    """Why ``method`` cannot join ``methods``, or None: it is not a :class:`Method` (or one the CLI cannot
    make a command of), or its name or command is one of theirs. A second method of one name would make the
    record ambiguous; a second command of one name would silently replace the first (``register`` and the
    entry points both ask here)."""
    if not isinstance(method, Method):
        return f"it is a {type(method).__name__}, not a ghostify Method"
    if not (isinstance(method.name, str) and method.name and isinstance(method.command, str) and method.command):
        return f"its name {method.name!r} and command {method.command!r} must be non-empty strings"
    if not dataclasses.is_dataclass(method.settings) or not isinstance(method.settings, type):
        return f"its settings {method.settings!r} are not a dataclass (fields made with ghostify.methods.setting)"
    for other in methods:
        taken = {other.name} | ({other.command} if other.apply is not None else set())
        if method.name in taken or (method.apply is not None and method.command in taken):
            return (f"a method named {method.name!r} (command {method.command!r}) is registered already: "
                    f"{other.name} (command {other.command})")
    return None


def add(method: Method) -> None:
    """Register one more method (a plug-in), after the shipped ones."""
    problem = refusal(method, registry())
    if problem is not None:
        raise GhostifyError(problem)
    _ADDED.append(method)
    REGISTRY.append(method)


def registry_loaded() -> bool:
    """Whether the registry was read already (the plug-ins are imported): listing it costs nothing more."""
    return bool(REGISTRY)


def registry() -> tuple[Method, ...]:
    if not REGISTRY and _LOADER:
        REGISTRY[:] = [*_LOADER[0](), *_ADDED]
    return tuple(REGISTRY)


def check_order(name: str, record: Any) -> None:
    """Refuse applying method ``name`` to a model whose record says a method it must precede ran already."""
    methods = registry()
    applied = {m.name: "the model" for m in methods if m.present(record)}
    problem = order_problem(next(m for m in methods if m.name == name), applied, methods)
    if problem is not None:
        raise GhostifyError(problem)


def layer_origin(record: Any) -> tuple[list[int], int] | None:
    """Which layers of the ``of``-layer model it was made from ``record``'s model's layers are
    (``(kept, of)``), when a method says so (``Method.layer_origin``: drop-layers); else None."""
    for method in registry():
        entry = record.entry(method.name) if record is not None else None
        if entry and method.layer_origin is not None:
            return method.layer_origin(entry)
    return None


def channel_origin(record: Any) -> tuple[list[int], int] | None:
    """Which of the ``of`` residual channels of the model it was made from ``record``'s model keeps
    (``(kept, of)``), when a method says so (``Method.channel_origin``: prune-hidden); else None."""
    for method in registry():
        entry = record.entry(method.name) if record is not None else None
        if entry and method.channel_origin is not None:
            return method.channel_origin(entry)
    return None


def distinct_layers(config: Any, adapter: ArchitectureAdapter, record: Any) -> int:
    """How many distinct layers ``config`` builds with ``record``'s methods (record None: a plain model)."""
    for method in registry():
        if method.distinct_layers is not None:
            count = method.distinct_layers(config, adapter, record.entry(method.name) if record is not None else None)
            if count is not None:
                return count
    return adapter.num_layers(config)
