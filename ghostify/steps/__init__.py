"""One function per command: what the CLI and recipes call, with the options as arguments (the
shared ones as settings dataclasses, ``ghostify.settings``, or as flat keywords).

The structural commands (``prune``, ``attach-ghost``, ``drop-layers``, ...) are one generic step,
:func:`apply_method`, made into a function per registered method on first use
(``steps.prune``, ``steps.attach_ghost``, ``steps.drop_layers``: the command's name with
underscores)."""

from __future__ import annotations

from typing import Any

from ..augment import augment
from ..methods import applied_by, methods
from .apply_method import apply_method, method_step
from .bench import bench
from .distill import distill
from .evaluate import evaluate
from .export import export
from .finetune import finetune
from .importance import importance
from .info import info
from .latency import latency


#: each registered method's step, made once (a recipe's validation asks for them all at every stage it checks)
_STEPS: dict[str, tuple[Any, Any]] = {}


def _step_of(method) -> Any:
    """``method``'s step function, made on first use (again where another method took its command's name)."""
    made = _STEPS.get(method.command)
    if made is None or made[0] is not method:
        made = _STEPS[method.command] = (method, method_step(method))
    return made[1]


def __getattr__(name: str) -> Any:
    method = applied_by(name.replace("_", "-"))
    if method is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _step_of(method)


def method_steps() -> dict[str, Any]:
    """The step of every registered method that a command of its own applies, by command name."""
    return {m.command: _step_of(m) for m in methods() if m.apply is not None}


__all__ = ["apply_method", "augment", "bench", "distill", "evaluate", "export", "finetune", "importance", "info", "latency",
           "method_step", "method_steps"]
