"""The one step behind every structural command (``prune``, ``attach-ghost``, ``drop-layers``, ...):
read a checkpoint, let its method refuse what it cannot do before a weight is read, apply it, and
write the result with the method's record entry and a history line.

:func:`method_step` turns a registered method into the Python function ``ghostify.steps.<command>``
(its settings fields as keywords), which the recipe runner calls for its stage and the CLI wraps.

Example:
    >>> from ghostify import steps
    >>> steps.prune("out/scored", "out/pruned", width="3/12")                     # doctest: +SKIP
    >>> steps.apply_method("ghost", "out/pruned", "out/ghost", kernel_size=5)      # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import typing
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..checkpoint import load_config, load_model, model_record, read_record, save_checkpoint
from ..errors import GhostifyError
from ..files import check_output_dir
from ..flatten import checks_arguments
from ..methods import DEFAULT_SEED, Context, Entry, Method, by_name, check_order
from ..record import GhostifyRecord, history_entry
from ..seeding import check_seed
from .examples import unlabelled_examples


def apply_method(method: Method | str, model: str | os.PathLike, output: str | os.PathLike, settings: Any = None, *,
                 seed: int = DEFAULT_SEED, overwrite: bool = False, **options: Any) -> GhostifyRecord:
    """Apply ``method`` (a registered method or its name) with ``settings`` (its settings
    dataclass, or its fields as ``options``) to ``model`` and write the result to ``output``."""
    method = by_name(method) if isinstance(method, str) else method
    settings = make_settings(method, settings, options)
    if method.seeded:
        check_seed(seed)
    paths = tuple((f"--{name.replace('_', '-')}", getattr(settings, name)) for name in method.path_settings)
    out = check_output_dir(output, overwrite=overwrite, inputs=(model, *paths))
    config = load_config(model)
    record = read_record(config)
    check_order(method.name, record)
    method.check(config, record, settings)  # before any weight is read
    net = load_model(model)
    record = model_record(net)
    entry = method.apply(net, record, settings, Context(source=str(model), seed=seed, examples=unlabelled_examples))
    record = with_entry(record, method, entry)
    arguments = {"model": str(model), **settings_values(settings), **(entry.history or {})}
    if method.seeded:
        arguments["seed"] = seed
    record.history.append(history_entry(method.command, arguments))
    save_checkpoint(net, out, record, tokenizer_source=model, overwrite=overwrite)
    return record


def make_settings(method: Method, settings: Any, options: dict[str, Any]) -> Any:
    """``settings`` with ``options`` over it (or the settings of ``options`` alone), each name checked."""
    cls = method.settings
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise GhostifyError(f"{method.command} has no setting {', '.join(unknown)}; its settings: {', '.join(sorted(known))}")
    if settings is not None:
        return replace(settings, **options) if options else settings
    missing = [f.name for f in dataclasses.fields(cls)
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in options]
    if missing:
        raise GhostifyError(f"{method.command} needs --{missing[0].replace('_', '-')}; see `ghostify {method.command} --help`")
    return cls(**options)


def settings_values(settings: Any) -> dict[str, Any]:
    return {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}


def with_entry(record: GhostifyRecord, method: Method, entry: Entry) -> GhostifyRecord:
    """``record`` after ``method`` applied ``entry``."""
    methods = dict(record.methods)
    if entry.data is not None:
        methods[method.name] = entry.stored()
    return replace(record, heads=entry.heads if entry.heads is not None else record.heads,
                   ffn=entry.ffn if entry.ffn is not None else record.ffn, methods=methods, history=list(record.history))


def method_step(method: Method) -> Callable[..., GhostifyRecord]:
    """``method`` as a step function: ``(model, output, *, <settings fields>, [seed], overwrite)``,
    each field's default its settings field's own (what the recipe schema and the CLI read)."""
    hints = typing.get_type_hints(method.settings)
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str | os.PathLike),
                  inspect.Parameter("output", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str | os.PathLike)]
    for f in dataclasses.fields(method.settings):
        default = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
        parameters.append(inspect.Parameter(f.name, keyword, default=default, annotation=hints[f.name]))
    if method.seeded:
        parameters.append(inspect.Parameter("seed", keyword, default=DEFAULT_SEED, annotation=int))
    parameters.append(inspect.Parameter("overwrite", keyword, default=False, annotation=bool))

    def step(model: str | os.PathLike, output: str | os.PathLike, **options: Any) -> GhostifyRecord:
        seed = options.pop("seed", DEFAULT_SEED)
        overwrite = options.pop("overwrite", False)
        return apply_method(method, model, output, seed=seed, overwrite=overwrite, **options)

    fields = {f.name for f in dataclasses.fields(method.settings)}

    def check_arguments(**arguments: Any) -> None:
        """What the step refuses of its arguments before reading anything: its settings, as they are made."""
        make_settings(method, None, {k: v for k, v in arguments.items() if k in fields})
        if method.seeded:
            check_seed(arguments.get("seed", DEFAULT_SEED))

    checks_arguments(step, check_arguments)
    step.__name__ = step.__qualname__ = method.command.replace("-", "_")
    step.__doc__ = inspect.cleandoc(method.help) if method.help else None
    step.__signature__ = inspect.Signature(parameters, return_annotation=GhostifyRecord)  # type: ignore[attr-defined]
    step.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": GhostifyRecord}
    return step
