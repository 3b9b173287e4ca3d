"""The ghostify record: what a checkpoint's structure is and how it got there.

It lives in ``config.json`` under the key ``ghostify`` so that the Hugging Face config and the
structure it describes always travel together. ``heads[l]`` holds the *original* indices of the
heads kept in distinct layer ``l`` (in their order in the weights), ``ffn[l]`` the FFN width.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import CheckpointError

RECORD_KEY = "ghostify"
RECORD_FORMAT = 1


@dataclass
class GhostifyRecord:
    heads: list[list[int]]
    ffn: list[int]
    ghost: dict[str, Any] | None = None
    # further structural methods, each None until its command ran (see their modules)
    embeddings: dict[str, Any] | None = None  # factorize-embeddings (ALBERT)
    sharing: dict[str, Any] | None = None  # share-layers (ALBERT)
    grouped: dict[str, Any] | None = None  # group-linear (SqueezeBERT)
    references: dict[str, Any] | None = None  # distill --references (RefBERT)
    history: list[dict[str, Any]] = field(default_factory=list)
    format: int = RECORD_FORMAT

    @classmethod
    def dense(cls, num_layers: int, num_heads: int, ffn_size: int) -> "GhostifyRecord":
        """The record of an unmodified model."""
        return cls(heads=[list(range(num_heads)) for _ in range(num_layers)], ffn=[ffn_size] * num_layers)

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "GhostifyRecord":
        if not isinstance(data, dict):
            raise CheckpointError(f"corrupt ghostify record in {source}: expected a mapping, got {type(data).__name__}")
        try:
            record = cls(
                heads=[[int(h) for h in layer] for layer in data["heads"]],
                ffn=[int(n) for n in data["ffn"]],
                ghost=data.get("ghost"),
                embeddings=data.get("embeddings"),
                sharing=data.get("sharing"),
                grouped=data.get("grouped"),
                references=data.get("references"),
                history=list(data.get("history", [])),
                format=int(data.get("format", RECORD_FORMAT)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"corrupt ghostify record in {source}: {exc!r}; re-create the checkpoint") from exc
        if record.format > RECORD_FORMAT:
            raise CheckpointError(
                f"{source} was written by a newer ghostify (record format {record.format}); upgrade ghostify"
            )
        if len(record.heads) != len(record.ffn):
            raise CheckpointError(
                f"corrupt ghostify record in {source}: {len(record.heads)} head lists but {len(record.ffn)} FFN sizes"
            )
        return record

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def heads_per_layer(self) -> list[int]:
        return [len(h) for h in self.heads]


def history_entry(command: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One step of a checkpoint's history, with the versions that produced it."""
    import torch
    import transformers

    from . import __version__

    return {
        "command": command,
        "arguments": {k: _jsonable(v) for k, v in arguments.items()},
        "versions": {"ghostify": __version__, "transformers": transformers.__version__, "torch": torch.__version__},
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)
