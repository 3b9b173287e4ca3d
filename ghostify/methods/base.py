"""The contract every structural compression method follows.

A method records itself in one field of the ghostify record, is applied by one command, rebuilds
its structure on a freshly built model from that field (``restore``, before the strict weight
load) and says what it did in ``ghostify info`` (``describe``). ``ghostify.methods.METHODS`` lists
them once, in the order ``load_model`` restores them; each states which methods it must come
before, which the recipe validator checks for a whole recipe before anything runs and every
command checks against the record of the model it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import GhostifyError

if TYPE_CHECKING:  # the contract needs neither at run time, and `ghostify --help` must not load torch
    from torch import nn

    from ..architectures import ArchitectureAdapter

#: ``restore(model, adapter, record, source)``: rebuild the recorded structure (a no-op when absent)
Restore = Callable[["nn.Module", "ArchitectureAdapter", Any, str], None]
#: ``describe(info)``: (what, value) rows for ``ghostify info`` from its JSON summary
Describe = Callable[[Mapping[str, Any]], list[tuple[str, str]]]


@dataclass(frozen=True)
class Method:
    """One structural method: its record field, the command that applies it, its order rules."""

    name: str
    #: the field of :class:`ghostify.record.GhostifyRecord` it fills (None until applied)
    record_key: str
    #: the CLI command / recipe stage that applies it
    command: str
    #: what a model that has it has ("ghost modules"), for messages
    noun: str
    restore: Restore
    describe: Describe
    #: methods that must not have been applied when this one is (it must come before them)
    before: tuple[str, ...] = ()
    #: whether a model that has it may get it again (re-factorising, re-sharing)
    repeatable: bool = True
    #: a stage setting that must be true for the command to apply it (distill: ``references``)
    when: str | None = None
    #: whether the record field says the method ran (pruning's field, the kept heads, always exists)
    tracked: bool = True

    def present(self, record: Any) -> bool:
        return self.tracked and record is not None and bool(getattr(record, self.record_key, None))

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
        if name in applied:
            later = by_name[name]
            return (f"{applied[name]} has {later.noun} ({later.label}); {method.label} before {later.label}: "
                    f"apply {method.label} to the checkpoint {later.label} was applied to (its history names it)")
    return None


#: the registry, handed over by :mod:`ghostify.methods` (which imports every method on first use,
#: so a method's ``apply`` reaches the order rules through here rather than by importing it)
REGISTRY: list[Method] = []
_LOADER: list[Callable[[], tuple[Method, ...]]] = []


def register(loader: Callable[[], tuple[Method, ...]]) -> None:
    """``loader`` lists the methods; it runs when the order rules are first needed."""
    _LOADER[:] = [loader]
    REGISTRY.clear()


def registry() -> tuple[Method, ...]:
    if not REGISTRY and _LOADER:
        REGISTRY[:] = _LOADER[0]()
    return tuple(REGISTRY)


def check_order(name: str, record: Any) -> None:
    """Refuse applying method ``name`` to a model whose record says a method it must precede ran already."""
    methods = registry()
    applied = {m.name: "the model" for m in methods if m.present(record)}
    problem = order_problem(next(m for m in methods if m.name == name), applied, methods)
    if problem is not None:
        raise GhostifyError(problem)
