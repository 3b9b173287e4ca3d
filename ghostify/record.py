"""The ghostify record: what a checkpoint's structure is and how it got there.

It lives in ``config.json`` under the key ``ghostify`` so that the Hugging Face config and the
structure it describes always travel together. ``heads[l]`` holds the *original* indices of the
heads kept in distinct layer ``l`` (in their order in the weights), ``ffn[l]`` the FFN width.
"""

from __future__ import annotations

import datetime as _dt
import os
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .architectures import attention_units, ffn_units
from .errors import CheckpointError
from .version import __version__

RECORD_KEY = "ghostify"
#: 2: each method's entry under ``methods``; 1 (still read): one top-level field per method
RECORD_FORMAT = 2
#: the record's own fields; in a format-1 record every other mapping is a method's entry
CORE_FIELDS = ("heads", "ffn", "methods", "history", "format")


@dataclass(slots=True)  # a misspelt or old field (record.ghost = ...) fails instead of vanishing
class GhostifyRecord:
    heads: list[list[int]]
    ffn: list[int]
    #: every applied method's entry, by method name (``ghostify.methods``; pruning's is heads/ffn)
    methods: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    format: int = RECORD_FORMAT

    def entry(self, name: str) -> dict[str, Any] | None:
        """The entry of method ``name``, or None when it was not applied."""
        return self.methods.get(name) or None

    @classmethod
    def dense(cls, num_layers: int, num_heads: int, ffn_size: int) -> "GhostifyRecord":
        """The record of an unmodified model."""
        return cls(heads=[list(range(num_heads)) for _ in range(num_layers)], ffn=[ffn_size] * num_layers)

    @classmethod
    def of_model(cls, model: Any, adapter: Any) -> "GhostifyRecord":
        """The record describing a model as it is now (for models that come without one)."""
        layers = adapter.layers(model)
        return cls(heads=[list(range(attention_units(adapter, layer, model.config))) for layer in layers],
                   ffn=[ffn_units(adapter, layer) for layer in layers])

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "GhostifyRecord":
        """The record of ``data`` (``config.json``'s ``ghostify`` entry), with every field whose
        validity needs nothing else checked: a tampered value is one line naming it. A format-1
        record (one top-level field per method) reads as today's."""
        if not isinstance(data, dict):
            raise CheckpointError(f"corrupt ghostify record in {source}: expected a mapping, got {type(data).__name__}")
        try:
            version = int(data.get("format", RECORD_FORMAT))
            methods = data.get("methods", {}) if version >= 2 else {
                k: v for k, v in data.items() if k not in CORE_FIELDS and v is not None}
            record = cls(
                heads=_int_lists(data["heads"], "heads", source),
                ffn=_ints(data["ffn"], "ffn", source),
                methods=methods,
                history=_history(data.get("history"), source),
                format=RECORD_FORMAT,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"corrupt ghostify record in {source}: {exc!r}; re-create the checkpoint") from exc
        if version > RECORD_FORMAT:
            raise CheckpointError(
                f"{source} was written by a newer ghostify (record format {version}); upgrade ghostify"
            )
        if not isinstance(record.methods, dict):
            _corrupt(source, "methods", record.methods, "expected a mapping of method entries")
        record.methods = {name: entry for name, entry in record.methods.items() if entry is not None}
        for name, entry in record.methods.items():
            if not isinstance(entry, dict):
                _corrupt(source, f"methods.{name}" if version >= 2 else name, entry, "expected a mapping")
        if len(record.heads) != len(record.ffn):
            raise CheckpointError(
                f"corrupt ghostify record in {source}: {len(record.heads)} head lists but {len(record.ffn)} FFN sizes"
            )
        for layer, heads in enumerate(record.heads):
            negative = [h for h in heads if h < 0]
            if negative:
                _corrupt(source, f"heads[{layer}]", negative[0], "head indices are 0 or more")
            repeated = sorted({h for h in heads if heads.count(h) > 1})
            if repeated:
                _corrupt(source, f"heads[{layer}]", repeated[0], "lists a head twice; each kept head appears once")
        for layer, size in enumerate(record.ffn):
            if size < 1:
                _corrupt(source, f"ffn[{layer}]", size, "FFN sizes are positive")
        return record

    def check_structure(self, source: str, *, num_heads: int, ffn_size: int, num_layers: int | None) -> None:
        """Check the record against its config: head indices of the original ``num_heads``, FFN
        sizes at most the original ``ffn_size``, one entry per distinct layer (each method checks
        its own entry: ``ghostify.methods.validate_record``)."""
        if num_layers is not None and len(self.heads) != num_layers:
            raise CheckpointError(f"corrupt ghostify record in {source}: heads and ffn list {len(self.heads)} layers but the "
                                  f"config builds {num_layers} distinct layers; re-create the checkpoint")
        for layer, heads in enumerate(self.heads):
            beyond = [h for h in heads if h >= num_heads]
            if beyond:
                _corrupt(source, f"heads[{layer}]", beyond[0], f"the model has {num_heads} heads (indices 0 to {num_heads - 1})")
        for layer, size in enumerate(self.ffn):
            if size > ffn_size:
                _corrupt(source, f"ffn[{layer}]", size, f"the original FFN size is {ffn_size}; a record only shrinks it")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def heads_per_layer(self) -> list[int]:
        return [len(h) for h in self.heads]


def _corrupt(source: str, field: str, value: Any, why: str) -> None:
    raise CheckpointError(f"corrupt ghostify record in {source}: {field} = {value!r}: {why}; re-create the checkpoint")


def _ints(values: Any, field: str, source: str) -> list[int]:
    if not isinstance(values, list):
        _corrupt(source, field, values, "expected a list")
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int):
            _corrupt(source, f"{field}[{i}]", value, "expected an integer")
    return list(values)


def _int_lists(values: Any, field: str, source: str) -> list[list[int]]:
    if not isinstance(values, list):
        _corrupt(source, field, values, "expected a list of lists")
    return [_ints(layer, f"{field}[{i}]", source) for i, layer in enumerate(values)]


def _history(value: Any, source: str) -> list[dict[str, Any]]:
    """The history's intact entries. The history says how the checkpoint was made and builds
    nothing, so a damaged entry costs its line (in ``info``, the model card and the checkpoints
    made from this one), said in one warning, not the command."""
    if value is None:
        return []
    if not isinstance(value, list):
        warnings.warn(f"the history in {source} is {_kind(value)}, not a list of steps: it is left out (of info, the "
                      "model card and the checkpoints made from this one)", UserWarning, stacklevel=2)
        return []
    faults = {number: fault for number, entry in enumerate(value, 1) if (fault := _entry_fault(entry)) is not None}
    if faults:
        number, fault = next(iter(faults.items()))
        more = f" (and {len(faults) - 1} more entries)" if len(faults) > 1 else ""
        warnings.warn(f"history entry {number} of {source} is damaged ({fault}){more}: it is left out (of info, the "
                      "model card and the checkpoints made from this one)", UserWarning, stacklevel=2)
    return [entry for number, entry in enumerate(value, 1) if number not in faults]


def _entry_fault(entry: Any) -> str | None:
    """What is wrong with one history entry (``history_entry``'s shape), or None."""
    if not isinstance(entry, dict):
        return f"{_kind(entry)}, not a mapping"
    if not isinstance(entry.get("command"), str):
        return f"its command is {entry.get('command')!r}, not a command's name"
    arguments = entry.get("arguments")
    if not isinstance(arguments, dict):
        return f"its arguments are {_kind(arguments)}, not a mapping"
    for key in (*PATH_ARGUMENTS, "task"):  # what later commands read back from the history
        if arguments.get(key) is not None and not isinstance(arguments[key], str):
            return f"its argument {key} is {arguments[key]!r}, not a string"
    if not isinstance(entry.get("time", ""), str):
        return f"its time is {entry['time']!r}, not a date"
    return None


def _kind(value: Any) -> str:
    """``value``'s type with its article: "a str", "an int"."""
    name = "missing value" if value is None else type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def history_entry(command: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One step of a checkpoint's history, with the versions that produced it."""
    import transformers  # deferred: `import ghostify` does not pay for transformers' import (about a second)

    return {
        "command": command,
        "arguments": {k: _absolute_if_local(k, _jsonable(v)) for k, v in arguments.items()},
        "versions": {"ghostify": __version__, "transformers": transformers.__version__, "torch": torch.__version__},
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


#: history arguments that name a model or data: a local one is recorded by its absolute path, so that
#: what reads the history later (export finds a sentence-transformers origin) does not depend on the
#: working directory of the command that wrote it
PATH_ARGUMENTS = ("model", "student", "teacher", "importance", "latency", "dataset", "mlm", "label_with")


def _absolute_if_local(key: str, value: Any) -> Any:
    if key in PATH_ARGUMENTS and isinstance(value, str) and value and os.path.exists(value):
        return os.path.abspath(value)
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)
